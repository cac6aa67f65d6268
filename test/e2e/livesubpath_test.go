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
func TestLiveSubPathRuntime(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, kind harness.RuntimeKind) { testLiveSubPath(t, kind, false) })
}

// TestLiveSubPathUserNamespace is TestLiveSubPathRuntime in a user-namespaced pod on
// containerd: the key is 0640 and owned by host 0:2000, as kubelet writes a secret for an
// fsGroup; after every update the container sees it as 0:2000 and its root reads it, because
// each layer is idmapped with the container's user namespace like runc's bind of the copy
// (a layer that reached the container un-idmapped would show 65534 and be unreadable).
func TestLiveSubPathUserNamespace(t *testing.T) {
	testLiveSubPath(t, harness.KindContainerd, true)
}

func testLiveSubPath(t *testing.T, kind harness.RuntimeKind, userns bool) {
	n := newNode(t, kind, nil, subPathConfig+"runtimeClasses:\n  default: {subPathUpdates: live}\n")
	if userns {
		if err := n.ctrd.AllowUserNamespaces(); err != nil {
			t.Fatal(err)
		}
	}
	pod := harness.KubeletPod{Root: filepath.Join(n.src(), "kubelet"), UID: "7c1e55a0-uid"}
	cfgDir := pod.VolumeDir("kubernetes.io~configmap", "cfg")
	// write is kubelet's atomic writer with the key 0640 and owned by 0:2000 (a secret for an
	// fsGroup) before ..data is swapped: new ..<ts> directory, ..data_tmp renamed over ..data,
	// the old directory removed.
	write := func(v int) {
		t.Helper()
		ts := fmt.Sprintf("..2026_11_26_00_00_%02d.000000000", v)
		files := map[string]string{"app.conf": fmt.Sprintf("app-v%d", v), "conf.d/a.ini": fmt.Sprintf("a-v%d", v)}
		for name, content := range files {
			p := filepath.Join(cfgDir, ts, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		key := filepath.Join(cfgDir, ts, "app.conf")
		if err := os.Chmod(key, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(key, 0, 2000); err != nil {
			t.Fatal(err)
		}
		old, _ := os.Readlink(filepath.Join(cfgDir, "..data"))
		if err := os.Symlink(ts, filepath.Join(cfgDir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(cfgDir, "..data_tmp"), filepath.Join(cfgDir, "..data")); err != nil {
			t.Fatal(err)
		}
		for _, top := range []string{"app.conf", "conf.d"} {
			_ = os.Symlink(filepath.Join("..data", top), filepath.Join(cfgDir, top))
		}
		if old != "" {
			if err := os.RemoveAll(filepath.Join(cfgDir, old)); err != nil {
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
	podID, err := cri.RunPod(n.ctx, harness.PodOptions{Name: "web", UID: pod.UID, UserNamespace: userns})
	if err != nil {
		t.Fatal(err)
	}
	id, err := cri.CreateContainer(n.ctx, podID, harness.ContainerOptions{Name: "app", Mounts: mounts, UserNamespace: userns})
	if err != nil {
		t.Fatal(err)
	}
	if err := cri.StartContainer(n.ctx, id); err != nil {
		t.Fatal(err)
	}
	read := "cat /etc/app.conf; echo -n ' '; cat /etc/conf.d/a.ini; echo -n ' '; stat -c '%a %u:%g' /etc/app.conf | tr -d '\\n'"
	if out, _ := n.sh(id, read); out != "app-v1 a-v1 640 0:2000" {
		t.Fatalf("container reads %q at start, want app-v1 a-v1 640 0:2000", out)
	}
	pid, _ := n.sh(id, "sleep 600 </etc/app.conf >/dev/null 2>&1 & echo -n $!")
	for v := 2; v <= 6; v++ {
		write(v)
		want := fmt.Sprintf("app-v%d a-v%d 640 0:2000", v, v)
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
