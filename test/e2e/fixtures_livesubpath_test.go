//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// kubeLiveAgentRestart restarts the agent between two patches of the configMap: an agent
// restart picks the live subPaths up again, an update made while it was away is not lost. With
// the agent stopped, patch 21 is made and kubelet writes it into pod live's volumes; a second
// later the live pods' readers still read 20 (nobody follows). The agent starts again; after
// its Synchronize both live pods read 21 on both paths, and then patch 22. Every read stays
// whole and every value is read, in order. It logs the time from the agent's connection to the
// readers' first read of 21, and returns the newest seq.
func kubeLiveAgentRestart(t *testing.T, n *kubeNode, uid string, paths []string) int {
	t.Helper()
	livePods := []string{"live", "optin-yes"}
	missed := liveUpdates + 1
	n.plugin.Stop()
	if err := n.api.PatchConfigMap(n.ctx, "default", "live", liveData(missed)); err != nil {
		t.Fatalf("patch configMap live to seq %d: %v", missed, err)
	}
	if err := harnessPoll(n.ctx, 45*time.Second, func() error {
		if f, d := n.volumeSeq(uid, "cfg", "value"), n.volumeSeq(uid, "cfgdir", "dir/a"); f != missed || d != missed {
			return fmt.Errorf("kubelet's volumes at seq %d (cfg/value) and %d (cfgdir/dir/a), want %d", f, d, missed)
		}
		return nil
	}); err != nil {
		t.Fatalf("with the agent stopped, the patch did not reach pod live's volumes: %v", err)
	}
	time.Sleep(time.Second) // an agent would apply it within milliseconds
	for _, name := range livePods {
		if _, err := n.waitReader(name, 1, 0, func(r *readerRun) error {
			for _, p := range paths {
				if got := r.lastSeq(p); got != liveUpdates {
					return fmt.Errorf("%s read seq %d, want %d", p, got, liveUpdates)
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("pod %s, with the agent stopped and the patch in its volumes: %v (what it had: nobody follows)", name, err)
		}
	}

	logged := newLogTimes("connected to")
	n.pluginLog = io.MultiWriter(testWriter{t, "mountkeeper"}, logged)
	n.startPluginWith(liveClassConfig)
	for _, name := range livePods {
		r, err := n.waitReader(name, 1, 30*time.Second, seesSeq(missed, paths...))
		if err != nil {
			t.Fatalf("pod %s: the agent started again, the patch made while it was away does not reach the live subPaths: %v", name, err)
		}
		for _, p := range paths {
			at, _ := r.seenAt(p, missed)
			t.Logf("pod %s: %s read the patch made while the agent was away %.1f ms after the agent connected again", name, p, ms(at.Sub(logged.at("connected to"))))
		}
	}
	next := missed + 1
	if err := n.api.PatchConfigMap(n.ctx, "default", "live", liveData(next)); err != nil {
		t.Fatalf("patch configMap live to seq %d: %v", next, err)
	}
	every := make([]int, next+1)
	for i := range every {
		every[i] = i
	}
	for _, name := range livePods {
		r, err := n.waitReader(name, 1, 45*time.Second, seesSeq(next, paths...))
		if err != nil {
			t.Fatalf("pod %s: the patch after the agent restart does not reach the live subPaths: %v", name, err)
		}
		for _, p := range paths {
			if name != "live" {
				break
			}
			if got := r.seqs(p); !slices.Equal(got, every) {
				t.Errorf("pod live: %s read the values %v across the agent restart, want every one of 0..%d in order", p, got, next)
			}
			if r.heldOK[p] != next {
				t.Errorf("pod live: %s: %d of %d descriptors opened before an update read the value before it", p, r.heldOK[p], next)
			}
		}
		if len(r.fails) > 0 || len(r.heldBad) > 0 {
			t.Errorf("pod %s across the agent restart: %d failed reads, %d descriptors opened before an update that read something else; first: %s",
				name, len(r.fails), len(r.heldBad), strings.Join(slices.Concat(r.fails[:min(len(r.fails), 10)], r.heldBad), "\n"))
		}
	}
	return next
}

func testLiveSubPath(t *testing.T, kind harness.RuntimeKind, userns bool) {
	s := startLiveSubPath(t, kind, userns)
	pid, _ := s.n.sh(s.id, "sleep 600 </etc/app.conf >/dev/null 2>&1 & echo -n $!")
	for v := 2; v <= 6; v++ {
		s.write(v)
		s.waitRead(v)
	}
	if out, _ := s.n.sh(s.id, "cat /proc/"+strings.TrimSpace(pid)+"/fd/0"); out != "app-v1" {
		t.Errorf("a process that opened /etc/app.conf before the updates reads %q, want app-v1", out)
	}
	s.checkLayers()
	s.remove()
}

func testLiveSubPathAgentRestart(t *testing.T, kind harness.RuntimeKind, userns bool) {
	s := startLiveSubPath(t, kind, userns)
	s.write(2)
	s.waitRead(2) // the first agent follows: version 1 on top of the first copy
	root := fmt.Sprintf("/proc/%d/root", containerPid(t, s.n, s.id))

	s.n.plugin.Stop()
	s.write(3) // missed: no agent
	if at := watchVersion(root, 3, time.Now().Add(time.Second)); !at.IsZero() {
		t.Fatalf("the container read version 3 with no agent running")
	}
	if out, _ := s.n.sh(s.id, liveRead); out != liveWant(2) {
		t.Fatalf("with no agent, after a swap it missed, the container reads %q, want %q (what it had)", out, liveWant(2))
	}

	logged := newLogTimes("connected to", ": updated")
	s.n.pluginLog = io.MultiWriter(testWriter{t, "mountkeeper"}, logged)
	seen := make(chan time.Time, 1)
	go func() { seen <- watchVersion(root, 3, time.Now().Add(30*time.Second)) }() // 30 s: a hang, not a measure
	started := time.Now()
	s.n.startPlugin() // same config, same state dir
	at := <-seen
	if at.IsZero() {
		t.Fatalf("30 s after the agent started again the container does not read the update it missed; plugin log:\n%s", s.n.plugin.Log())
	}
	connected := logged.at("connected to")
	t.Logf("%s: agent started again: connected %.1f ms after its start; from the connection, the first copy updated after %.1f ms, the container read the missed update (key and directory) after %.1f ms",
		kind, ms(connected.Sub(started)), ms(logged.at(": updated").Sub(connected)), ms(at.Sub(connected)))
	s.waitRead(3) // through the container's own processes too
	// The agent logs the resumption once Resume has returned: after it kicked each copy's
	// update (which the container may read at once) and saved its state.
	if err := s.n.plugin.WaitLog(s.n.ctx, "following 2 live subPath copies again", 1, 10*time.Second); err != nil {
		t.Errorf("the new agent did not log resuming 2 live copies: %v", err)
	}

	s.write(4)
	s.waitRead(4)
	s.checkLayers()
	// Only version 3 of each copy is left: numbered after the missed one (2), which the
	// first agent's version 1 and the base's content went before.
	want := []string{"0.v3", "1.v3"}
	left := s.versionsLeft()
	for deadline := time.Now().Add(15 * time.Second); !slices.Equal(left, want) && time.Now().Before(deadline); left = s.versionsLeft() {
		time.Sleep(100 * time.Millisecond) // removed by the scan of /proc, every 2 s
	}
	if !slices.Equal(left, want) {
		t.Errorf("versions of the copies left in %s: %v, want %v", s.copiesDir(), left, want)
	}
	s.remove()
}
