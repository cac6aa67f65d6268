//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestRuntimeConfigureKeepsClassInUse: a class removed from the config while a pod of it runs
// (then the agent's init container runs `runtime configure`) keeps its wrapper link and
// handler, and configure names the process that holds them: the restarted runtime can still
// stop and remove the pod. The next configure, with the pod gone, removes them.
func TestRuntimeConfigureKeepsClassInUse(t *testing.T) {
	for _, kind := range []harness.RuntimeKind{harness.KindContainerd, harness.KindCRIO} {
		t.Run(string(kind), func(t *testing.T) {
			n := newGuardedNode(t, kind)
			n.runtimeCommand("configure")
			if err := n.rt.Restart(n.ctx); err != nil {
				t.Fatal(err)
			}
			cri := n.rt.CRI()
			var pod string
			deadline := time.Now().Add(30 * time.Second)
			for {
				var err error
				if pod, err = cri.RunPod(n.ctx, harness.PodOptions{RuntimeHandler: "mk-guard"}); err != nil {
					t.Fatal(err)
				}
				id, err := cri.CreateContainer(n.ctx, pod, harness.ContainerOptions{})
				if err == nil {
					err = cri.StartContainer(n.ctx, id)
				}
				if err == nil {
					break
				}
				// A refused attempt's sandbox runs through the wrapper too: it goes now.
				if rerr := cri.RemovePod(n.ctx, pod); rerr != nil {
					t.Fatal(rerr)
				}
				if time.Now().After(deadline) {
					t.Fatalf("class container: %v", err)
				}
				time.Sleep(500 * time.Millisecond)
			}

			// The class leaves the config; configure runs (the agent's init container).
			other := "stateDir: SRC/state\nruntimeClasses:\n  mk-other:\n    mounts:\n      - {source: SRC/guarded, destination: /guarded, readOnly: true}\n"
			if err := os.WriteFile(n.config, []byte(strings.ReplaceAll(other, "SRC", n.src())), 0o644); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(n.dir, "install", "class", "mk-guard")
			out := n.runtimeCommand("configure")
			t.Logf("runtime configure with mk-guard gone from the config: %s", out)
			if !strings.Contains(out, `runtime class "mk-guard" is no longer in the config`) || !strings.Contains(out, "runs "+link) {
				t.Errorf("configure does not say it keeps mk-guard for its running pod: %s", out)
			}
			if _, err := os.Lstat(link); err != nil {
				t.Errorf("mk-guard's link while its pod runs: %v", err)
			}
			if err := n.rt.Restart(n.ctx); err != nil {
				t.Fatal(err)
			}
			if err := cri.RemovePod(n.ctx, pod); err != nil {
				t.Fatalf("remove the class pod after configure: %v", err)
			}

			out = n.runtimeCommand("configure")
			t.Logf("runtime configure with the pod gone: %s", out)
			if _, err := os.Lstat(link); err == nil {
				t.Errorf("configure left mk-guard's link once its pod was gone: %s", out)
			}
			if strings.Contains(out, "no longer in the config") {
				t.Errorf("configure still keeps mk-guard: %s", out)
			}
		})
	}
}
