//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// liveRead is what the container reads of its live subPaths: the key, the directory's file,
// and the key's mode and owner.
const liveRead = "cat /etc/app.conf; echo -n ' '; cat /etc/conf.d/a.ini; echo -n ' '; stat -c '%a %u:%g' /etc/app.conf | tr -d '\\n'"

// liveWant is liveRead's output at version v.
func liveWant(v int) string { return fmt.Sprintf("app-v%d a-v%d 640 0:2000", v, v) }

// liveSubPath is a running container of a subPathUpdates: live class with a configMap key
// (/etc/app.conf, a file subPath) and a configMap directory (/etc/conf.d, a directory subPath)
// of a kubelet-like volume, at version 1.
type liveSubPath struct {
	t      *testing.T
	n      *node
	pod    harness.KubeletPod
	cfgDir string
	id     string
}

// startLiveSubPath starts a node of kind with a live default class, writes version 1 and
// runs the container (in a user-namespaced pod with userns), which must read it.
func startLiveSubPath(t *testing.T, kind harness.RuntimeKind, userns bool) *liveSubPath {
	t.Helper()
	n := newNode(t, kind, nil, subPathConfig+"runtimeClasses:\n  default: {subPathUpdates: live}\n")
	if userns {
		if err := n.ctrd.AllowUserNamespaces(); err != nil {
			t.Fatal(err)
		}
	}
	pod := harness.KubeletPod{Root: filepath.Join(n.src(), "kubelet"), UID: "7c1e55a0-uid"}
	s := &liveSubPath{t: t, n: n, pod: pod, cfgDir: pod.VolumeDir("kubernetes.io~configmap", "cfg")}
	s.write(1)
	var mounts []harness.Mount
	for i, m := range []struct{ subPath, ctrPath string }{{"app.conf", "/etc/app.conf"}, {"conf.d", "/etc/conf.d"}} {
		target, err := pod.BindSubPath(s.cfgDir, "cfg", "app", i, m.subPath)
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
	if s.id, err = cri.CreateContainer(n.ctx, podID, harness.ContainerOptions{Name: "app", Mounts: mounts, UserNamespace: userns}); err != nil {
		t.Fatal(err)
	}
	if err := cri.StartContainer(n.ctx, s.id); err != nil {
		t.Fatal(err)
	}
	if out, _ := n.sh(s.id, liveRead); out != liveWant(1) {
		t.Fatalf("container reads %q at start, want %q", out, liveWant(1))
	}
	return s
}

// write is kubelet's atomic writer at version v with the key 0640 and owned by 0:2000 (a
// secret for an fsGroup) before ..data is swapped: new ..<ts> directory, ..data_tmp renamed
// over ..data, the old directory removed.
func (s *liveSubPath) write(v int) {
	t := s.t
	t.Helper()
	ts := fmt.Sprintf("..2026_11_26_00_00_%02d.000000000", v)
	files := map[string]string{"app.conf": fmt.Sprintf("app-v%d", v), "conf.d/a.ini": fmt.Sprintf("a-v%d", v)}
	for name, content := range files {
		p := filepath.Join(s.cfgDir, ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := filepath.Join(s.cfgDir, ts, "app.conf")
	if err := os.Chmod(key, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(key, 0, 2000); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(s.cfgDir, "..data"))
	if err := os.Symlink(ts, filepath.Join(s.cfgDir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(s.cfgDir, "..data_tmp"), filepath.Join(s.cfgDir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, top := range []string{"app.conf", "conf.d"} {
		_ = os.Symlink(filepath.Join("..data", top), filepath.Join(s.cfgDir, top))
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(s.cfgDir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// waitRead waits (10 s at most) until the container reads version v of both paths.
func (s *liveSubPath) waitRead(v int) {
	s.t.Helper()
	want := liveWant(v)
	out, _ := s.n.sh(s.id, liveRead)
	for deadline := time.Now().Add(10 * time.Second); out != want && time.Now().Before(deadline); out, _ = s.n.sh(s.id, liveRead) {
		time.Sleep(20 * time.Millisecond)
	}
	if out != want {
		s.t.Fatalf("after update %d the container reads %q, want %q; plugin log:\n%s", v, out, want, s.n.plugin.Log())
	}
}

// checkLayers checks that the container holds 2 mounts at each live path: its bind and one
// layer.
func (s *liveSubPath) checkLayers() {
	s.t.Helper()
	for _, p := range []string{"/etc/app.conf", "/etc/conf.d"} {
		if out, _ := s.n.sh(s.id, "grep -c ' "+p+" ' /proc/self/mountinfo"); strings.TrimSpace(out) != "2" {
			s.t.Errorf("%s mounts at %s in the container, want 2 (its bind and one layer)", out, p)
		}
	}
}

// copiesDir is where the container's copies of volume cfg are.
func (s *liveSubPath) copiesDir() string {
	return filepath.Join(s.n.src(), "state", "subpath", s.pod.UID, s.id, "cfg")
}

// versionsLeft lists the versions (<copy>.v<n>) in the container's copies of the volume.
func (s *liveSubPath) versionsLeft() []string {
	entries, err := os.ReadDir(s.copiesDir())
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".v") {
			out = append(out, e.Name())
		}
	}
	return out
}

// remove stops and removes the container, whose copies and their mounts must go with it.
func (s *liveSubPath) remove() {
	s.t.Helper()
	cri := s.n.rt.CRI()
	if err := cri.StopContainer(s.n.ctx, s.id); err != nil {
		s.t.Fatal(err)
	}
	if err := cri.RemoveContainer(s.n.ctx, s.id); err != nil {
		s.t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.n.src(), "state", "subpath", s.pod.UID, s.id)); !os.IsNotExist(err) {
		s.t.Errorf("the container's copies outlive it: %v", err)
	}
	if left := hostMounts(s.t, filepath.Join(s.n.src(), "state", "subpath", s.pod.UID)); len(left) > 0 {
		s.t.Errorf("mounts left below the pod's copies after the container went:\n%s", mountLines(left))
	}
}

// watchVersion reads the live paths through root (/proc/PID/root: the container's mount
// namespace) every 2 ms until both show version v, and returns when they first did; the zero
// time when they did not by deadline.
func watchVersion(root string, v int, deadline time.Time) time.Time {
	want := [][]byte{[]byte(fmt.Sprintf("app-v%d", v)), []byte(fmt.Sprintf("a-v%d", v))}
	for {
		key, _ := os.ReadFile(filepath.Join(root, "etc/app.conf"))
		dir, _ := os.ReadFile(filepath.Join(root, "etc/conf.d/a.ini"))
		if bytes.Equal(key, want[0]) && bytes.Equal(dir, want[1]) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			return time.Time{}
		}
		time.Sleep(2 * time.Millisecond)
	}
}
