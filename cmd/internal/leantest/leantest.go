// Package leantest checks that a binary started once per container (the hook, the runtime
// wrapper) stays lean: its start-up is paid on every container start.
package leantest

import (
	"os/exec"
	"strings"
	"testing"
)

// Banned are the packages a lean binary must not link: what the plugin needs (NRI, ttrpc,
// protobuf, gRPC, Prometheus, the WASM runtime).
var Banned = []string{"github.com/containerd/nri", "github.com/containerd/ttrpc", "google.golang.org/protobuf", "github.com/prometheus/", "google.golang.org/grpc", "github.com/tetratelabs/wazero"}

// Check fails t if the package in the working directory links a Banned package or a package
// outside the standard library that needs cgo (the Makefile builds with CGO_ENABLED=0; the
// standard library's cgo files, net's resolver say, are optional).
func Check(t *testing.T) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{if and .CgoFiles (not .Standard)}}cgo{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		n++
		pkg, cgo, _ := strings.Cut(line, " ")
		if cgo == "cgo" {
			t.Errorf("%s needs cgo", pkg)
		}
		for _, b := range Banned {
			if strings.HasPrefix(pkg, b) {
				t.Errorf("links %s", pkg)
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list named %d packages: %s", n, out)
	}
}
