//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/guard"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

const guardConfig = `
runtimeClasses:
  mk-guard:
    mounts:
      - {source: SRC/guarded, destination: /guarded, readOnly: true}
`

// TestGuardWhilePluginAway: containerd configured by `mountkeeper runtime configure` never
// starts a container of a class without its class mounts, even while the plugin is away,
// and runs everything else: a class container created while the plugin is stopped is refused
// at start with mountkeeper's message, a default container runs, and once the plugin is back
// the class container gets its mounts. A second `runtime configure` changes nothing.
func TestGuardWhilePluginAway(t *testing.T) {
	n := newNode(t, harness.KindContainerd, []string{"mk-guard"}, guardConfig)
	if err := os.MkdirAll(filepath.Join(n.src(), "guarded"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.src(), "guarded", "marker"), []byte("class-mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	configure := func() string {
		t.Helper()
		out, err := exec.Command(n.bin, "runtime", "configure", "--runtime", "containerd", "--config", n.config,
			"--config-file", n.ctrd.ConfigPath(), "--hook-path", n.bin, "--base-spec-dir", filepath.Join(n.dir, "specs")).CombinedOutput()
		if err != nil {
			t.Fatalf("runtime configure: %v\n%s", err, out)
		}
		return string(out)
	}
	t.Logf("runtime configure: %s", configure())
	first, err := os.ReadFile(n.ctrd.ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	if out := configure(); !strings.Contains(out, "nothing to change") {
		t.Errorf("a second runtime configure changed something: %s", out)
	}
	if again, _ := os.ReadFile(n.ctrd.ConfigPath()); !bytes.Equal(first, again) {
		t.Error("a second runtime configure rewrote containerd's config")
	}
	if err := n.ctrd.Restart(n.ctx); err != nil {
		t.Fatal(err)
	}
	cri := n.ctrd.CRI()
	// refused counts the guard's refusals the runtime reported, by reason, to compare with
	// what the guard recorded for the agent's metrics.
	refused := map[guard.Refusal]uint64{}
	count := func(handler string, err error) {
		switch {
		case strings.Contains(err.Error(), "did not handle this container"):
			refused[guard.Refusal{Class: handler, Reason: guard.ReasonNotHandled}]++
		case strings.Contains(err.Error(), "has not handled any container"):
			refused[guard.Refusal{Class: handler, Reason: guard.ReasonNoKey}]++
		}
	}
	// start creates and starts a container of handler that prints the class mount's marker.
	start := func(handler, name string) (string, error) {
		pod, err := cri.RunPod(n.ctx, harness.PodOptions{Name: name + "-pod", RuntimeHandler: handler})
		if err != nil {
			t.Fatalf("run pod: %v", err)
		}
		id, err := cri.CreateContainer(n.ctx, pod, harness.ContainerOptions{Name: name})
		if err != nil {
			count(handler, err)
			return "", err
		}
		if err := cri.StartContainer(n.ctx, id); err != nil {
			count(handler, err)
			return "", err
		}
		out, _ := n.sh(id, "cat /guarded/marker 2>&1")
		return out, nil
	}
	// eventually retries start until the plugin has (re)connected: until then the guard
	// refuses, which is what it is for.
	eventually := func(name string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; ; i++ {
			out, err := start("mk-guard", name+"-"+string(rune('a'+i)))
			if err == nil {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("class container with the plugin running: %v", err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if out := eventually("before"); out != "class-mount" {
		t.Fatalf("class container with the plugin running reads %q, want its class mount", out)
	}

	n.plugin.Stop()
	_, err = start("mk-guard", "away")
	if err == nil {
		t.Fatal("a class container started while the plugin was away: it runs without its class mount")
	}
	for _, want := range []string{`mountkeeper: runtime class "mk-guard", container`, "did not handle this container", "systemctl status mountkeeper"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	t.Logf("while the plugin is away: %v", err)
	if out, err := start("", "plain"); err != nil || strings.Contains(out, "class-mount") {
		t.Errorf("a container of no class while the plugin is away: %q, %v; want it to run, without the class mount", out, err)
	}

	n.startPlugin()
	if out := eventually("back"); out != "class-mount" {
		t.Errorf("class container after the plugin is back reads %q, want its class mount", out)
	}
	// Every refusal was recorded where the agent counts it (mountkeeper_guard_refusals_total).
	recorded, err := guard.ReadRefusals(filepath.Join(n.src(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("refusals seen by the runtime: %v; recorded by the guard: %v", refused, recorded)
	if len(refused) == 0 || fmt.Sprint(recorded) != fmt.Sprint(refused) {
		t.Errorf("the guard recorded %v, the runtime reported %v", recorded, refused)
	}
}
