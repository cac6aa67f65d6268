//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

func testPreRegisteredPlugin(t *testing.T, kind harness.RuntimeKind) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := harness.WorkDir(t, "mk-pre-")
	bin, err := harness.BuildMountkeeper(dir)
	if err != nil {
		t.Fatal(err)
	}
	plugins, conf, src := filepath.Join(dir, "plugins"), filepath.Join(dir, "conf.d"), filepath.Join(dir, "src")
	for _, d := range []string{plugins, conf, src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "marker"), []byte("pre-registered"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugins, "10-mountkeeper"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "stateDir: " + filepath.Join(dir, "state") + "\nruntimeClasses:\n  mk-pre:\n    mounts: [{source: " + src + ", destination: /pre, readOnly: true}]\n"
	if err := os.WriteFile(filepath.Join(conf, "10-mountkeeper.conf"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := harness.StartRuntime(ctx, kind, harness.Options{Handlers: []string{"mk-pre"}, NRI: true, NRIPluginPath: plugins, NRIPluginConfigPath: conf})
	if err != nil {
		t.Fatalf("start %s: %v", kind, err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("cleanup %s: %v", kind, err)
		}
	})
	cri := rt.CRI()
	check := func(name string) {
		t.Helper()
		pod, err := cri.RunPod(ctx, harness.PodOptions{Name: name, RuntimeHandler: "mk-pre"})
		if err != nil {
			t.Fatal(err)
		}
		id, err := cri.CreateContainer(ctx, pod, harness.ContainerOptions{Name: name})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if err := cri.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		out, _, code, err := cri.Exec(ctx, id, "cat", "/pre/marker")
		if err != nil || code != 0 || out != "pre-registered" {
			log, _ := os.ReadFile(rt.LogPath())
			t.Fatalf("%s reads %q (exit %d, %v): the pre-registered plugin did not add its mount\n%s", name, out, code, err, lastBytes(log, 3000))
		}
	}
	check("first")
	if err := rt.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	check("after-restart")
	if log, _ := os.ReadFile(rt.LogPath()); !strings.Contains(string(log), "10-mountkeeper") {
		t.Errorf("%s's log never names the pre-registered plugin", kind)
	}
}
