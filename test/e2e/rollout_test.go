//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// rolloutMidScript is the command of the class pod created while the agent pod is replaced:
// it writes what it found at its own start (its class mount there or not) to /reads, then
// sleeps. A container that started without its mount says so itself, whatever happens later.
const rolloutMidScript = `if grep -q " /data .* - fuse.sshfs " /proc/self/mountinfo && cat /data/hello >/dev/null; then echo mounted; else echo NO-MOUNT; fi > /reads/$POD; exec sleep 3600`

// TestHelmRollout: upgrading and rolling back the agent must not interrupt a pod reading a
// network mount. A real rolling update of the chart's DaemonSet by the real
// kube-controller-manager (DaemonSet controller) and kube-scheduler on the real kubelet
// and containerd, under a pod reading an sshfs class mount every 100 ms. The chart is
// installed with image A (this tree, version stamp e2e-a), `helm upgrade` names image B (the
// same tree stamped e2e-b), then `helm rollback` goes back to A. Each time the DaemonSet
// controller replaces the agent pod (maxUnavailable as the chart sets it: 1) and the test
// checks that the reader saw no failed read, that the new agent (its log names its version)
// adopted the same host mount (mount ID) served by the same FUSE daemon (PID), and that a
// class pod created while the old agent pod was going away was either refused by the guard
// (kubelet retrying until the new agent is up) or got its mount: it never started without it
// (the pod records what it found at its own start). It logs the rollout time, the reads, and
// how long the mid-rollout pod waited. Nothing is pulled: both images are built and imported.
//
// subPaths through the rollout: two pods read a configMap key mounted with subPath (a file)
// and a directory of a configMap volume mounted with subPath, every 10 ms (livereader): one in
// class mk-live (subPathUpdates: live), one of no class (kubelet's subPath, mountkeeper's
// private copy). Once the old agent's process is gone the configMap is patched (kubelet
// nudged to write it at once) and the test waits until kubelet swapped the volumes; after the
// rollout it is patched again. Every read must be whole and of one version, the readers never
// restart, the live pod's subPath mounts are the ones it had until the new agent applies the
// missed update, which it must read, then the later one too (60 s each); the other pod's
// mounts stay untouched and it reads only its first value. Logged: reads, when the gap's swap
// happened against the new agent's connection, and how long after that connection the
// container read it. At the end the other pod's container is restarted after four updates
// (its kubelet bind is stale, kubernetes #68211): it must start and read the newest value.
//
// The upgrade, the rollback and the restart are subtests that each bring the release (atAgent)
// and the configMap (atUpdates) to where they start if the ones before them did not run:
// `-run 'TestHelmRollout/rollback'` upgrades to B first, unchecked, then checks the rollback.
//
// hostNamespacesPID names the test process: PID 1 of this machine is a sandbox process whose
// namespaces cannot be opened. The uninstall hooks are off: TestHelmUninstall tests them, and
// this node has no service proxy for their waiter.
func TestHelmRollout(t *testing.T) {
	helmBin := pinnedHelm()
	testenv.Require(t, append([]string{helmBin}, sshfsNeeds...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r := newHelmRollout(t, ctx, helmBin)
	n := r.n
	defer r.uninstall(t)
	r.install(t)
	n.checkListenerCertificate(t, r.agent, r.tlsCert)
	// The chart's update strategy is what the DaemonSet controller rolls by: one node's agent
	// pod away at a time, no second one beside it.
	var ds struct {
		Spec struct {
			UpdateStrategy struct {
				Type          string `json:"type"`
				RollingUpdate struct {
					MaxUnavailable any `json:"maxUnavailable"`
					MaxSurge       any `json:"maxSurge"`
				} `json:"rollingUpdate"`
			} `json:"updateStrategy"`
		} `json:"spec"`
	}
	if err := n.api.Do(ctx, "GET", "/apis/apps/v1/namespaces/"+deployNS+"/daemonsets/mountkeeper", "", nil, &ds); err != nil {
		t.Fatal(err)
	}
	if u := ds.Spec.UpdateStrategy; u.Type != "RollingUpdate" || fmt.Sprint(u.RollingUpdate.MaxUnavailable) != "1" || fmt.Sprint(u.RollingUpdate.MaxSurge) != "0" {
		t.Errorf("the DaemonSet's update strategy is %+v, want RollingUpdate, maxUnavailable 1, maxSurge 0", u)
	}
	r.startReaders(t)
	sub := r.sub

	steps := []struct {
		name, from, tag string
		args            func(t *testing.T) []string
	}{
		{"upgrade to B", "e2e-a", "e2e-b", func(t *testing.T) []string {
			return []string{"upgrade", "mountkeeper", r.chart, "--values", r.values(t, "e2e-b")}
		}},
		{"rollback to A", "e2e-b", "e2e-a", func(*testing.T) []string { return []string{"rollback", "mountkeeper", "1"} }},
	}
	for i, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			r.atAgent(t, s.from)
			okBefore, failBefore := countLog(t, filepath.Join(r.reads, "log"))
			subReadsBefore, _ := sub.reads(t)
			liveMounts, kubeletMounts := sub.mountIDs(t, subPathLive), sub.mountIDs(t, subPathKubelet)
			oldAgent := n.pluginPID(t)
			start := time.Now()
			args := s.args(t)
			r.tag = ""
			t.Logf("helm %s:\n%s", args[0], r.helm(t, args...))
			// The DaemonSet controller deletes the old agent pod (maxUnavailable 1, one node):
			// from then on until the new one connects, a class container meets the guard.
			n.waitPodLeaving(t, r.agent, 60*time.Second)
			leaving := time.Since(start)
			mid := fmt.Sprintf("mid-rollout-%d", i)
			pod := n.podManifest(podSpec{name: mid, runtimeClass: "mk-sshfs", script: rolloutMidScript, volumes: r.readerVolumes, mounts: r.readerMounts})
			c := pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			c["env"] = []any{map[string]any{"name": "POD", "value": mid}}
			created := time.Now()
			if _, err := n.api.CreatePod(ctx, "default", pod); err != nil {
				t.Fatal(err)
			}
			gap := sub.patchInGap(t, oldAgent)
			r.agent = n.waitRollout(t, s.tag, 120*time.Second)
			r.tag = s.tag
			plugin := r.agent
			rolled := time.Since(start)
			connected := n.connectedAt(t, plugin)
			id := n.waitRunning(t, mid, 90*time.Second)
			waited := time.Since(created)
			var refusal string
			for _, e := range n.eventsTextLines("default", mid) {
				if strings.Contains(e, "did not handle this container") {
					refusal = e
				}
			}
			data, err := os.ReadFile(filepath.Join(r.reads, mid))
			if err != nil || strings.TrimSpace(string(data)) != "mounted" {
				t.Errorf("the class pod created during the rollout found at its start: %q (%v), want its sshfs mount", data, err)
			}
			if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
				t.Errorf("the class pod created during the rollout reads %q (exit %d)", out, code)
			}
			time.Sleep(time.Second) // reads after the new agent took over
			okAfter, failAfter := countLog(t, filepath.Join(r.reads, "log"))
			subReadsAfter, subFailed := sub.reads(t)
			if failAfter > failBefore || okAfter-okBefore < 10 {
				t.Errorf("reads during the rollout: %d ok, %d failed", okAfter-okBefore, failAfter-failBefore)
			}
			if mp, d := n.sshfsMount(t); mp != r.mountPoint || d != r.daemon || mountIDAt(t, mp) != r.mountID {
				t.Errorf("after the rollout: mount %s (ID %s), daemon %d; want %s (ID %s), %d (adopted)", mp, mountIDAt(t, mp), d, r.mountPoint, r.mountID, r.daemon)
			}
			if c := fuseMountsAt(t, r.mountPoint); c != 1 {
				t.Errorf("%d sshfs mounts at %s after the rollout, want 1", c, r.mountPoint)
			}
			log := n.podLog(plugin, "mountkeeper")
			if !strings.Contains(log, "mountkeeper "+s.tag+": config from") || !strings.Contains(log, "adopted the mount found at start-up") {
				t.Errorf("the new agent pod %s does not log version %s and an adoption:\n%s", plugin, s.tag, log)
			}
			n.checkListenerCertificate(t, plugin, r.tlsCert)
			sub.checkRollout(t, s.name, subReadsBefore, subReadsAfter, subFailed, liveMounts, kubeletMounts, gap, connected)
			outcome := "started without a refusal (an agent was connected when its container was created)"
			if refusal != "" {
				outcome = "refused by the guard, then started with its mount once the new agent was up"
				t.Logf("the refusal kubectl describe pod shows: %s", refusal)
			}
			t.Logf("rollout %s: old agent pod leaving after %v, new agent pod %s available after %v; reads during it: %d ok, %d failed; the class pod created mid-rollout waited %v: %s",
				s.name, leaving.Round(time.Millisecond), plugin, rolled.Round(time.Millisecond), okAfter-okBefore, failAfter-failBefore, waited.Round(time.Millisecond), outcome)
		})
	}
	// Each rollout above patches the configMap twice (in the gap and after it).
	t.Run("kubelet's subPath pod restarted after the updates", func(t *testing.T) {
		r.atUpdates(t, 2*len(steps))
		sub.restartKubeletPod(t)
	})
}
