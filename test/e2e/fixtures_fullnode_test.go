//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// fullNodeConfig has a live class (mk-live) and one with kubelet's semantics (mk-kube), each
// with a class mount of its own. KUBELET and SRC are replaced.
const fullNodeConfig = `
kubeletRoot: KUBELET
stateDir: SRC/state
runtimeClasses:
  mk-live:
    subPathUpdates: live
    mounts:
      - {source: SRC/class-live, destination: /class, propagation: None, readOnly: true}
  mk-kube:
    mounts:
      - {source: SRC/class-kube, destination: /class, propagation: None, readOnly: true}
`

// fullPod is one pod of a full node: its own configMap, mounted as a file subPath and a
// directory subPath; every other pod is of the live class, and the first few live ones run
// livereader on both paths (the others sleep).
type fullPod struct {
	name, cm     string
	live, reader bool
}

// fullPods is the node's set of count pods named prefix-NNN, readers of them readers.
func fullPods(prefix string, count, readers int) []fullPod {
	pods := make([]fullPod, count)
	for i := range pods {
		live := i%2 == 0
		pods[i] = fullPod{name: fmt.Sprintf("%s-%03d", prefix, i), cm: fmt.Sprintf("cm-%03d", i),
			live: live, reader: live && i/2 < readers}
	}
	return pods
}

func (p fullPod) class() string {
	if p.live {
		return "mk-live"
	}
	return "mk-kube"
}

// fullPodSpec is p's pod: volumes as readerPod's, on p's own configMap.
func (n *kubeNode) fullPodSpec(p fullPod) podSpec {
	volumes := []any{
		map[string]any{"name": "cfg", "configMap": map[string]any{"name": p.cm}},
		map[string]any{"name": "cfgdir", "configMap": map[string]any{"name": p.cm, "items": []any{
			map[string]any{"key": "a", "path": "dir/a"}, map[string]any{"key": "b", "path": "dir/b"},
		}}},
	}
	mounts := []any{
		map[string]any{"name": "cfg", "mountPath": liveFilePath, "subPath": "value"},
		map[string]any{"name": "cfgdir", "mountPath": liveDirPath, "subPath": "dir"},
	}
	// sleep as PID 1 ignores SIGTERM: grace 0 deletes at once.
	script := "exec sleep 86400"
	if p.reader {
		volumes = append(volumes,
			map[string]any{"name": "tools", "hostPath": map[string]any{"path": filepath.Join(n.dir, "tools"), "type": "Directory"}},
			map[string]any{"name": "out", "hostPath": map[string]any{"path": filepath.Join(n.dir, "out"), "type": "Directory"}})
		mounts = append(mounts,
			map[string]any{"name": "tools", "mountPath": "/tools", "readOnly": true},
			map[string]any{"name": "out", "mountPath": "/out"})
		script = fmt.Sprintf("exec /tools/livereader -out /out/%s.log -interval 10ms file:%s dir:%s", p.name, liveFilePath, liveDirPath)
	}
	return podSpec{name: p.name, runtimeClass: p.class(), script: script, volumes: volumes, mounts: mounts}
}

// startFullPods creates the pods and waits until every one's container runs; it returns the
// time from the first create to the first poll that saw all running, and each pod's
// container ID by name. A container waiting for another reason than its creation fails the
// test.
func (n *kubeNode) startFullPods(pods []fullPod, timeout time.Duration) (time.Duration, map[string]string) {
	t := n.t
	t.Helper()
	want := map[string]bool{}
	for _, p := range pods {
		want[p.name] = true
	}
	start := time.Now()
	for _, p := range pods {
		if _, err := n.api.CreatePod(n.ctx, "default", n.podManifest(n.fullPodSpec(p))); err != nil {
			t.Fatalf("create pod %s: %v", p.name, err)
		}
	}
	ids := map[string]string{}
	err := harnessPoll(n.ctx, timeout, func() error {
		list, err := n.api.ListPods(n.ctx, "default")
		if err != nil {
			return err
		}
		clear(ids)
		var notYet []string
		for _, pod := range list {
			if !want[pod.Metadata.Name] {
				continue
			}
			running := false
			for _, cs := range pod.Status.ContainerStatuses {
				if cs.State.Running != nil {
					running = true
					ids[pod.Metadata.Name] = strings.TrimPrefix(cs.ContainerID, "containerd://")
				} else if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
					return fmt.Errorf("pod %s: container waiting: %s: %s", pod.Metadata.Name, w.Reason, w.Message)
				}
			}
			if !running {
				notYet = append(notYet, pod.Metadata.Name)
			}
		}
		if len(ids) < len(want) {
			return fmt.Errorf("%d of %d pods running; not yet: %s", len(ids), len(want), strings.Join(notYet[:min(len(notYet), 10)], " "))
		}
		return nil
	})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("after %v: %v", took.Round(time.Millisecond), err)
	}
	return took, ids
}

// deleteFullPods deletes the pods (grace 0), waits until they are gone from the API and
// kubelet's root, and then removes their stopped sandboxes and containers as kubelet's garbage
// collector would (a minute later), so that the next round starts on an empty runtime. It
// returns how long kubelet took.
func (n *kubeNode) deleteFullPods(pods []fullPod) time.Duration {
	t := n.t
	t.Helper()
	start := time.Now()
	for _, p := range pods {
		if err := n.api.DeletePod(n.ctx, "default", p.name, 0); err != nil {
			t.Fatalf("delete pod %s: %v", p.name, err)
		}
	}
	err := harnessPoll(n.ctx, 3*time.Minute, func() error {
		list, err := n.api.ListPods(n.ctx, "default")
		if err != nil {
			return err
		}
		if len(list) > 0 {
			return fmt.Errorf("%d pods still in the API (%s ...)", len(list), list[0].Metadata.Name)
		}
		entries, _ := os.ReadDir(filepath.Join(n.kube.RootDir(), "pods"))
		if len(entries) > 0 {
			return fmt.Errorf("%d pod directories left in kubelet's root", len(entries))
		}
		ctrs, err := n.ctrd.CRI().ListContainers(n.ctx)
		if err != nil {
			return err
		}
		for _, c := range ctrs {
			if c.GetState().String() == "CONTAINER_RUNNING" {
				return fmt.Errorf("container %.12s (%s) still running", c.GetId(), c.GetMetadata().GetName())
			}
		}
		return nil
	})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("pods not torn down after %v: %v", took.Round(time.Millisecond), err)
	}
	sandboxes, err := n.ctrd.CRI().ListPods(n.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sandboxes {
		if err := n.ctrd.CRI().RemovePod(n.ctx, s.GetId()); err != nil {
			t.Fatalf("remove the deleted pods' sandboxes: %v", err)
		}
	}
	return took
}

// containerSeqs reads a running container's live paths from the host, through its process's
// root: the seq of the file subPath's value and of the directory subPath's a.
func (n *kubeNode) containerSeqs(id string) (file, dir int, err error) {
	pid, err := n.ctrd.CRI().ContainerPid(n.ctx, id)
	if err != nil {
		return -1, -1, err
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	read := func(p string) (int, error) {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return -1, err
		}
		if len(b) != liveValueSize {
			return -1, fmt.Errorf("%s: read %d bytes, want %d", p, len(b), liveValueSize)
		}
		return strconv.Atoi(string(b[:6]))
	}
	if file, err = read(liveFilePath); err != nil {
		return -1, -1, err
	}
	if dir, err = read(filepath.Join(liveDirPath, "a")); err != nil {
		return -1, -1, err
	}
	return file, dir, nil
}

// mountkeeperLeft lists what of mountkeeper's is left on the host once no pod runs: any
// pod's copy tmpfs or other mount below the state directory (but the node's copy tmpfs,
// which lives as long as the agent), and any pod's directory in the copies.
func (n *kubeNode) mountkeeperLeft() []string {
	t := n.t
	t.Helper()
	state := filepath.Join(n.dir, "src", "state")
	var left []string
	all, err := testsupport.Mounts(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		below := m.Mountpoint == state || strings.HasPrefix(m.Mountpoint, state+"/")
		switch {
		case m.Source == copies.PodTmpfsSource:
			left = append(left, "a pod's copy tmpfs: "+mountLine(m))
		case below && m.Source == copies.NodeTmpfsSource && m.FSType == "tmpfs":
		case below:
			left = append(left, "a mount below the state directory: "+mountLine(m))
		}
	}
	copyDir := filepath.Join(state, "subpath")
	entries, err := os.ReadDir(copyDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		left = append(left, "in the copies: "+filepath.Join(copyDir, e.Name()))
	}
	return left
}

// nodePodCapacity is the node's status.capacity.pods (kubelet's maxPods).
func (n *kubeNode) nodePodCapacity() string {
	var node struct {
		Status struct {
			Capacity map[string]string `json:"capacity"`
		} `json:"status"`
	}
	if err := n.api.Do(n.ctx, "GET", "/api/v1/nodes/"+n.kube.NodeName(), "", nil, &node); err != nil {
		n.t.Fatal(err)
	}
	return node.Status.Capacity["pods"]
}

// patchFullNode patches every pod's configMap to seq and waits until every live pod reads it
// on both paths, and every other pod, once kubelet has written it into its volumes, still
// reads the value it started with (0). It logs how long the patches took to reach all.
func (n *kubeNode) patchFullNode(pods []fullPod, ids, uids map[string]string, seq int) {
	t := n.t
	t.Helper()
	start := time.Now()
	for _, p := range pods {
		if err := n.api.PatchConfigMap(n.ctx, "default", p.cm, liveData(seq)); err != nil {
			t.Fatalf("patch configMap %s to seq %d: %v", p.cm, seq, err)
		}
	}
	pending := slices.Clone(pods)
	err := harnessPoll(n.ctx, 90*time.Second, func() error {
		var errs []string
		pending = slices.DeleteFunc(pending, func(p fullPod) bool {
			file, dir, err := n.containerSeqs(ids[p.name])
			if err != nil {
				errs = append(errs, fmt.Sprintf("pod %s (%s): %v; its mounts at %s: %s", p.name, p.class(), err, liveDirPath, n.containerMountsAt(ids[p.name], liveDirPath)))
				return false
			}
			if p.live {
				if file == seq && dir == seq {
					return true
				}
				errs = append(errs, fmt.Sprintf("pod %s (live): reads seq %d (file subPath) and %d (directory subPath), want %d; kubelet's volumes at %d and %d",
					p.name, file, dir, seq, n.volumeSeq(uids[p.name], "cfg", "value"), n.volumeSeq(uids[p.name], "cfgdir", "dir/a")))
				return false
			}
			if file != 0 || dir != 0 {
				errs = append(errs, fmt.Sprintf("pod %s (kubelet's semantics): reads seq %d and %d, want 0", p.name, file, dir))
				return false
			}
			if n.volumeSeq(uids[p.name], "cfg", "value") == seq && n.volumeSeq(uids[p.name], "cfgdir", "dir/a") == seq {
				return true
			}
			errs = append(errs, fmt.Sprintf("pod %s: kubelet has not written seq %d yet", p.name, seq))
			return false
		})
		if len(errs) > 0 {
			return fmt.Errorf("%d of %d pods not there yet:\n%s", len(errs), len(pods), strings.Join(errs[:min(len(errs), 10)], "\n"))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("patch %d of every configMap: %v", seq, err)
	}
	t.Logf("patch %d of %d configMaps: every live pod read it, every other pod kept 0, %v after the first patch", seq, len(pods), time.Since(start).Round(time.Millisecond))
}

// checkFullNodeRunning checks that every pod's container runs and never restarted.
func (n *kubeNode) checkFullNodeRunning(pods []fullPod) {
	t := n.t
	t.Helper()
	list, err := n.api.ListPods(n.ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]harness.Pod{}
	for _, p := range list {
		byName[p.Metadata.Name] = p
	}
	var bad []string
	for _, p := range pods {
		pod, ok := byName[p.name]
		if !ok || len(pod.Status.ContainerStatuses) != 1 {
			bad = append(bad, fmt.Sprintf("pod %s: missing or without its container status", p.name))
			continue
		}
		cs := pod.Status.ContainerStatuses[0]
		if cs.State.Running == nil || cs.RestartCount != 0 {
			bad = append(bad, fmt.Sprintf("pod %s: running %v, restartCount %d, last state %+v", p.name, cs.State.Running != nil, cs.RestartCount, cs.LastState.Terminated))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d pods not running or restarted:\n%s", len(bad), len(pods), strings.Join(bad[:min(len(bad), 10)], "\n"))
	}
}

// ctrdLogSince returns containerd's log lines after offset that contain substr.
func (n *kubeNode) ctrdLogSince(offset int64, substr string) string {
	data, err := os.ReadFile(n.ctrd.LogPath())
	if err != nil {
		n.t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data[min(int(offset), len(data)):]), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// containerMountsAt is the mountinfo lines of a running container at path, for messages.
func (n *kubeNode) containerMountsAt(id, path string) string {
	pid, err := n.ctrd.CRI().ContainerPid(n.ctx, id)
	if err != nil {
		return err.Error()
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == path {
			out = append(out, l)
		}
	}
	return strings.Join(out, " | ")
}
