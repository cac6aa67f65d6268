//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestKubeNode starts a real kubelet on the harness containerd and checks that a pod of a
// RuntimeClass whose handler has a mountkeeper class gets the class mount, and a pod without
// runtimeClassName does not.
func TestKubeNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := newKubeNode(t, ctx, harness.KubeOptions{})
	n.startPlugin(true)

	withClass := n.runningContainer(podSpec{name: "with-class", runtimeClass: "mk-kube", script: "exec sleep 3600"})
	out, stderr, code, err := n.ctrd.CRI().Exec(ctx, withClass, "cat", "/class/marker")
	if err != nil || code != 0 || out != "from-class\n" {
		t.Errorf("pod of RuntimeClass mk-kube: cat /class/marker = %q, %q, exit %d, %v; want from-class", out, stderr, code, err)
	}
	plain := n.runningContainer(podSpec{name: "plain", script: "exec sleep 3600"})
	out, _, code, err = n.ctrd.CRI().Exec(ctx, plain, "ls", "/class")
	if err != nil || code == 0 {
		t.Errorf("pod without runtimeClassName: ls /class = %q, exit %d, %v; want no /class", out, code, err)
	}
}

// raceSecondsEnv shortens (or lengthens) each half of TestKubeletSubPathRace.
const raceSecondsEnv = "MOUNTKEEPER_SUBPATH_RACE_SECONDS"

// TestKubeletSubPathRace: a configMap update must not fail a container's start by racing
// kubelet's subPath bind (kubernetes #127602). The load test on a real kubelet:
// Several pods mount one key of one configMap with subPath; each container appends what it
// read to a hostPath file and exits after half a second, and kubelet restarts it with its
// crash-loop back-off capped at 1s, while the configMap is patched every second. A configMap
// update that lands between kubelet's subPath preparation and runc's mount makes the start
// fail with ENOENT on the volume-subpaths bind. The control half runs mountkeeper with
// subPathRepair off and must see that failure; the second half runs it with subPathRepair on
// and must see none.
func TestKubeletSubPathRace(t *testing.T) {
	seconds := 75
	if s := os.Getenv(raceSecondsEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("%s=%q: want a positive number of seconds", raceSecondsEnv, s)
		}
		seconds = v
	}
	duration := time.Duration(seconds) * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute+3*duration)
	defer cancel()
	n := newKubeNode(t, ctx, harness.KubeOptions{
		FeatureGates:              map[string]bool{"KubeletCrashLoopBackOffMax": true},
		MaxContainerRestartPeriod: time.Second,
	})

	n.startPlugin(false)
	control := n.subPathRace("control", duration)
	n.startPlugin(true)
	repaired := n.subPathRace("repair", duration)

	t.Logf("control: %d ENOENT of %d starts; mountkeeper: %d ENOENT of %d starts",
		control.enoent, control.starts(), repaired.enoent, repaired.starts())
	if control.enoent == 0 {
		t.Errorf("control (subPathRepair: false) did not reproduce the race: 0 ENOENT in %d starts over %v; "+
			"the test proves nothing about the repair on this machine", control.starts(), duration)
	}
	if repaired.enoent > 0 {
		t.Errorf("with mountkeeper (subPathRepair: true): %d of %d container starts failed with the subPath ENOENT; first:\n%s",
			repaired.enoent, repaired.starts(), repaired.firstError)
	}
	if repaired.runs < raceRuns {
		t.Errorf("with mountkeeper: only %d successful container runs; want at least %d", repaired.runs, raceRuns)
	}
	if repaired.readENOENT > 0 {
		t.Errorf("with mountkeeper: %d runs started but could not read the subPath file", repaired.readENOENT)
	}
}

const (
	racePods = 6
	// raceRuns is the least number of successful runs the repaired half must see: on
	// average every pod started and restarted once.
	raceRuns = racePods * 2
)

// subPathRace runs one half of TestKubeletSubPathRace with pods and a configMap named after
// phase, and removes them afterwards.
func (n *kubeNode) subPathRace(phase string, duration time.Duration) raceResult {
	t := n.t
	t.Helper()
	ctx := n.ctx
	runs := filepath.Join(n.dir, "runs-"+phase)
	if err := os.MkdirAll(runs, 0o755); err != nil {
		t.Fatal(err)
	}
	logOffset := fileSize(n.ctrd.LogPath())
	cm := "race-" + phase
	if err := n.api.CreateConfigMap(ctx, "default", cm, map[string]string{"value": "v0"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range racePods {
		name := fmt.Sprintf("race-%s-%d", phase, i)
		names = append(names, name)
		p := podSpec{
			name: name,
			script: fmt.Sprintf(`v=$(cat /etc/race/value 2>/dev/null) || v=ENOENT; echo "$v" >>/runs/%s; sleep 0.5`,
				name),
			volumes: []any{
				map[string]any{"name": "cfg", "configMap": map[string]any{"name": cm}},
				map[string]any{"name": "runs", "hostPath": map[string]any{"path": runs, "type": "Directory"}},
			},
			mounts: []any{
				map[string]any{"name": "cfg", "mountPath": "/etc/race/value", "subPath": "value"},
				map[string]any{"name": "runs", "mountPath": "/runs"},
			},
		}
		if _, err := n.api.CreatePod(ctx, "default", n.podManifest(p)); err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
	}
	// Patch the configMap every second for duration, while watching the pods' status for
	// start errors (a cross-check of containerd's log, which is what is counted).
	seen := map[string]string{} // container ID -> message of an ENOENT start failure
	deadline := time.Now().Add(duration)
	nextPatch := time.Now()
	for version := 1; time.Now().Before(deadline); {
		if !time.Now().Before(nextPatch) {
			if err := n.api.PatchConfigMap(ctx, "default", cm, map[string]string{"value": "v" + strconv.Itoa(version)}); err != nil {
				t.Fatalf("patch configMap %s: %v", cm, err)
			}
			version++
			nextPatch = nextPatch.Add(time.Second)
		}
		for _, name := range names {
			pod, err := n.api.GetPod(ctx, "default", name)
			if err != nil {
				t.Fatalf("get pod %s: %v", name, err)
			}
			for _, cs := range pod.Status.ContainerStatuses {
				if tm := cs.LastState.Terminated; tm != nil && isSubPathENOENT(tm.Message) {
					seen[tm.ContainerID] = tm.Message
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("%s: %v", phase, err)
	}
	for _, name := range names {
		if err := n.api.DeletePod(ctx, "default", name, 0); err != nil {
			t.Errorf("delete pod %s: %v", name, err)
		}
	}
	// Wait until kubelet has torn the pods down, so that nothing of this half runs on into
	// the next one, then count.
	err := harnessPoll(ctx, 90*time.Second, func() error {
		pods, err := n.api.ListPods(ctx, "default")
		if err != nil {
			return err
		}
		for _, p := range pods {
			if strings.HasPrefix(p.Metadata.Name, "race-"+phase+"-") {
				return fmt.Errorf("pod %s still exists", p.Metadata.Name)
			}
		}
		entries, _ := os.ReadDir(filepath.Join(n.kube.RootDir(), "pods"))
		if len(entries) > 0 {
			return fmt.Errorf("%d pod directories left in kubelet's root", len(entries))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: pods not torn down: %v", phase, err)
	}
	if err := n.api.DeleteConfigMap(ctx, "default", cm); err != nil {
		t.Errorf("delete configMap %s: %v", cm, err)
	}

	var r raceResult
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(runs, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			switch line {
			case "":
			case "ENOENT":
				r.readENOENT++
			default:
				r.runs++
			}
		}
	}
	log, err := os.ReadFile(n.ctrd.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log[min(logOffset, int64(len(log))):]), "\n") {
		if strings.Contains(line, `msg="StartContainer for`) && isSubPathENOENT(line) {
			r.enoent++
			if r.firstError == "" {
				r.firstError = line
			}
		}
	}
	t.Logf("%s: %d ENOENT start failures in containerd's log (%d distinct seen in pod status), %d runs, %d runs that could not read the file",
		phase, r.enoent, len(seen), r.runs, r.readENOENT)
	return r
}
