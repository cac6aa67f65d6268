package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/nri"
)

// TestSameRefusalFromEveryFrontEnd: one broken class (a source missing on the host, a second
// mount on a private source asking for rshared) gives byte-identical error text from
// `mountkeeper render`, the NRI plugin's CreateContainer and the precreate hook, because all
// three hand the container to the one engine, which alone formats refusals.
func TestSameRefusalFromEveryFrontEnd(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "present")
	if err := os.Mkdir(present, 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.yaml")
	yaml := "runtimeClasses:\n  broken:\n    allowBidirectionalForUnprivileged: true\n    mounts:\n" +
		"      - {source: " + filepath.Join(dir, "missing") + ", destination: /data}\n" +
		"      - {source: " + present + ", destination: /shared, propagation: Bidirectional}\n"
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := `{"ociVersion":"1.2.0","root":{"path":"rootfs"},"mounts":[],"annotations":{` +
		`"io.kubernetes.cri.sandbox-namespace":"ns","io.kubernetes.cri.sandbox-name":"pod","io.kubernetes.cri.container-name":"ctr"}}`

	cli := func(args ...string) string {
		var out, errOut bytes.Buffer
		if code := run(args, strings.NewReader(spec), &out, &errOut); code != 1 {
			t.Fatalf("mountkeeper %s: exit %d, want 1; stderr %q", strings.Join(args, " "), code, errOut.String())
		}
		return strings.TrimSuffix(errOut.String(), "\n")
	}
	fromRender := cli("render", "--config", config, "--runtime-class", "broken", "--container", "ns/pod/ctr")
	fromPrecreate := cli("hook", "precreate", "--config", config, "--runtime-class", "broken", "--error-log", "none")

	cfg, err := configs.Load(config)
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	plugin := nri.NewPlugin(cfg, true, nri.NewHostChecker(), log)
	_, _, err = plugin.CreateContainer(context.Background(),
		&api.PodSandbox{Namespace: "ns", Name: "pod", RuntimeHandler: "broken"},
		&api.Container{Id: "c1", Name: "ctr"})
	if err == nil {
		t.Fatal("the plugin created a container of a broken class")
	}
	fromPlugin := err.Error()

	for _, want := range []string{`mountkeeper: runtime class "broken", container ns/pod/ctr: `, "does not exist on the host", "needs it shared"} {
		if !strings.Contains(fromPlugin, want) {
			t.Errorf("plugin refusal lacks %q:\n%s", want, fromPlugin)
		}
	}
	if strings.Contains(fromPlugin, "\n") {
		t.Errorf("plugin refusal spans lines:\n%s", fromPlugin)
	}
	if fromRender != fromPlugin || fromPrecreate != fromPlugin {
		t.Errorf("front ends disagree:\nplugin:    %s\nrender:    %s\nprecreate: %s", fromPlugin, fromRender, fromPrecreate)
	}
}
