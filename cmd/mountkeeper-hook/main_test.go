package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStaysLean: the point of this binary is its start-up, so it must not link what the
// plugin needs (NRI, ttrpc, protobuf, Prometheus) nor any package outside the standard
// library that needs cgo (the Makefile builds with CGO_ENABLED=0; the standard library's
// cgo files, net's resolver say, are optional).
func TestStaysLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{if and .CgoFiles (not .Standard)}}cgo{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	banned := []string{"github.com/containerd/nri", "github.com/containerd/ttrpc", "google.golang.org/protobuf", "github.com/prometheus/", "google.golang.org/grpc", "github.com/tetratelabs/wazero"}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		n++
		pkg, cgo, _ := strings.Cut(line, " ")
		if cgo == "cgo" {
			t.Errorf("%s needs cgo", pkg)
		}
		for _, b := range banned {
			if strings.HasPrefix(pkg, b) {
				t.Errorf("links %s", pkg)
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list named %d packages: %s", n, out)
	}
}
