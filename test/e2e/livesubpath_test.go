//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestLiveSubPathRuntime runs live subPath updates (issue 25) through a real runtime and runc:
// a container of a class with subPathUpdates: live mounts a configMap key and a configMap
// directory with subPath; after each of 5 atomic-writer updates (old timestamp directory
// removed) it reads the new content of both; a process that opened the key before the updates
// still reads the first; the container holds its bind and one layer at the path; removing the
// container removes its copies. The real-kubelet test and the latency benchmark are
// test/e2e's kubelet tests (issue 25, the other half).
func TestLiveSubPathRuntime(t *testing.T) { forEachRuntime(t, testLiveSubPathRuntime) }

func testLiveSubPathRuntime(t *testing.T, kind harness.RuntimeKind) {
	n := newNode(t, kind, nil, subPathConfig+"runtimeClasses:\n  default: {subPathUpdates: live}\n")
	pod := harness.KubeletPod{Root: filepath.Join(n.src(), "kubelet"), UID: "7c1e55a0-uid"}
	cfgDir := pod.VolumeDir("kubernetes.io~configmap", "cfg")
	write := func(v int) {
		t.Helper()
		old, err := harness.WriteAtomic(cfgDir, map[string]string{"app.conf": fmt.Sprintf("app-v%d", v), "conf.d/a.ini": fmt.Sprintf("a-v%d", v)})
		if err != nil {
			t.Fatal(err)
		}
		if old != "" {
			if err := os.RemoveAll(old); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(1)
	var mounts []harness.Mount
	for i, m := range []struct{ subPath, ctrPath string }{{"app.conf", "/etc/app.conf"}, {"conf.d", "/etc/conf.d"}} {
		target, err := pod.BindSubPath(cfgDir, "cfg", "app", i, m.subPath)
		if err != nil {
			t.Fatal(err)
		}
		mounts = append(mounts, harness.Mount{HostPath: target, ContainerPath: m.ctrPath, ReadOnly: true})
	}
	cri := n.rt.CRI()
	podID, err := cri.RunPod(n.ctx, harness.PodOptions{Name: "web", UID: pod.UID})
	if err != nil {
		t.Fatal(err)
	}
	id, err := cri.CreateContainer(n.ctx, podID, harness.ContainerOptions{Name: "app", Mounts: mounts})
	if err != nil {
		t.Fatal(err)
	}
	if err := cri.StartContainer(n.ctx, id); err != nil {
		t.Fatal(err)
	}
	read := "cat /etc/app.conf; echo -n ' '; cat /etc/conf.d/a.ini"
	if out, _ := n.sh(id, read); out != "app-v1 a-v1" {
		t.Fatalf("container reads %q at start, want app-v1 a-v1", out)
	}
	pid, _ := n.sh(id, "sleep 600 </etc/app.conf >/dev/null 2>&1 & echo -n $!")
	for v := 2; v <= 6; v++ {
		write(v)
		want := fmt.Sprintf("app-v%d a-v%d", v, v)
		out, _ := n.sh(id, read)
		for deadline := time.Now().Add(10 * time.Second); out != want && time.Now().Before(deadline); out, _ = n.sh(id, read) {
			time.Sleep(20 * time.Millisecond)
		}
		if out != want {
			t.Fatalf("after update %d the container reads %q, want %q; plugin log:\n%s", v, out, want, n.plugin.Log())
		}
	}
	if out, _ := n.sh(id, "cat /proc/"+strings.TrimSpace(pid)+"/fd/0"); out != "app-v1" {
		t.Errorf("a process that opened /etc/app.conf before the updates reads %q, want app-v1", out)
	}
	for _, p := range []string{"/etc/app.conf", "/etc/conf.d"} {
		if out, _ := n.sh(id, "grep -c ' "+p+" ' /proc/self/mountinfo"); strings.TrimSpace(out) != "2" {
			t.Errorf("%s mounts at %s in the container, want 2 (its bind and one layer)", out, p)
		}
	}
	if err := cri.StopContainer(n.ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := cri.RemoveContainer(n.ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(n.src(), "state", "subpath", pod.UID, id)); !os.IsNotExist(err) {
		t.Errorf("the container's copies outlive it: %v", err)
	}
}
