//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/guard"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

func guardWhilePluginAway(t *testing.T, kind harness.RuntimeKind) {
	// No handler of the class in the runtime's own config: configure declares it, as on an
	// operator's node.
	n := newGuardedNode(t, kind)
	if err := os.WriteFile(filepath.Join(n.src(), "guarded", "marker"), []byte("class-mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := n.runtimeCommand("configure")
	t.Logf("runtime configure: %s", out)
	if !strings.Contains(out, "restart needed") {
		t.Errorf("configure does not say the runtime must restart: %s", out)
	}
	if out := n.runtimeCommand("configure"); !strings.Contains(out, "nothing to change") {
		t.Errorf("a second runtime configure changed something: %s", out)
	}
	if err := n.rt.Restart(n.ctx); err != nil {
		t.Fatal(err)
	}
	cri := n.rt.CRI()
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
	_, err := start("mk-guard", "away")
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
