package netmount

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

const (
	sshfsContent = "exported by sshd over loopback\n"
	sshfsGrace   = 200 * time.Millisecond
)

// sshfsWorld is what a TestSSHFS subtest starts from, in its own private mount namespace: an
// export served by sshd over loopback, two specs of it (spec, and spec2 with reconnect) and a
// Manager config that wants both. Nothing is mounted yet.
type sshfsWorld struct {
	tmp          string
	sc           *CgroupScoper
	keys, export string
	spec, spec2  netspec.Spec
	stateDir     string
	cfg          Config
}

// newSSHFSWorld re-runs t in a private mount namespace and returns false (the caller returns at
// once), or, in that re-run, the world t starts from.
func newSSHFSWorld(t *testing.T) (*sshfsWorld, bool) {
	tmp, sc, ok := inPrivateNamespace(t)
	if !ok {
		return nil, false
	}
	// A test that hangs panics at its timeout, and no cleanup runs: kill what it started just
	// before that, so that no sshd, FUSE daemon or cgroup outlives it.
	if d, ok := t.Deadline(); ok {
		wd := time.AfterFunc(time.Until(d)-5*time.Second, func() {
			fmt.Fprintln(os.Stderr, "TestSSHFS watchdog: out of time: killing what the test started")
			emergencyCleanup(filepath.Join(sc.Root, sc.Parent), tmp)
			os.Exit(3)
		})
		t.Cleanup(func() { wd.Stop() })
	}
	w := &sshfsWorld{tmp: tmp, sc: sc, stateDir: filepath.Join(tmp, "state")}
	w.keys, w.export = prepareSSHFSExport(t, tmp, sshfsContent)
	port := freePort(t)
	startSSHD(t, sc, w.keys, port)
	w.spec, w.spec2 = w.sshSpec(port), w.sshSpec(port, "reconnect")
	w.cfg = Config{StateDir: w.stateDir, Grace: sshfsGrace, MountTimeout: 10 * time.Second, RetryBackoff: 100 * time.Millisecond,
		Scoper: sc, Log: testLogger(t), Wanted: []netspec.Spec{w.spec, w.spec2}}
	return w, true
}

func (w *sshfsWorld) sshSpec(port int, extra ...string) netspec.Spec {
	return sshfsSpec(w.keys, w.export, port, extra...)
}

// scopeOf is the cgroup (below the cgroup root) of s's FUSE daemon.
func (w *sshfsWorld) scopeOf(s netspec.Spec) string { return "/" + w.sc.Parent + "/mount-" + s.Key() }

// manager is a new Manager of w.cfg, closed at the end of t (Close may come earlier: one
// Manager per state directory at a time).
func (w *sshfsWorld) manager(t *testing.T) *Manager {
	t.Helper()
	m, err := NewManager(w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// mount mounts w.spec through m for ctr-a and returns where.
func (w *sshfsWorld) mount(t *testing.T, m *Manager) string {
	t.Helper()
	m.Ensure(w.spec)
	path, err := acquireEventually(t, m, 15*time.Second, w.spec, "ctr-a")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// agentMountKilled runs a fake agent in a cgroup of its own that mounts spec2, kills that
// cgroup (cgroup.kill), and checks that the mount and its FUSE daemons live on. It returns the
// mount and its daemons.
func (w *sshfsWorld) agentMountKilled(t *testing.T) (string, []int) {
	t.Helper()
	agentCG := filepath.Join(w.sc.Root, w.sc.Parent, "agent")
	if err := os.Mkdir(agentCG, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgJSON, _ := json.Marshal(agentConfig{StateDir: w.stateDir, CgroupRoot: w.sc.Root, CgroupParent: w.sc.Parent, Spec: w.spec2, Wanted: w.cfg.Wanted})
	agent, ready := startInCgroup(t, agentCG, []string{agentEnv + "=" + string(cfgJSON)}, os.Args[0])
	var line string
	select {
	case line = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the fake agent did not mount within 30s")
	}
	path2, ok := strings.CutPrefix(line, "READY ")
	if !ok {
		t.Fatalf("fake agent: %s", line)
	}
	if cg, _ := testsupport.CgroupV2(agent.Process.Pid); cg != "/"+w.sc.Parent+"/agent" {
		t.Errorf("agent runs in %s, want /%s/agent", cg, w.sc.Parent)
	}
	daemons2 := daemonsOf(t, path2)
	for _, pid := range daemons2 {
		if cg, _ := testsupport.CgroupV2(pid); cg != w.scopeOf(w.spec2) {
			t.Errorf("the agent's FUSE daemon %d is in %s, want %s", pid, cg, w.scopeOf(w.spec2))
		}
	}

	killed := time.Now()
	if err := os.WriteFile(filepath.Join(agentCG, "cgroup.kill"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	werr := agent.Wait()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("agent ended with %v, want SIGKILL", werr)
	}
	if procs := cgroupProcs(t, agentCG); len(procs) != 0 {
		t.Errorf("agent cgroup still has %v", procs)
	}
	for i := 0; i < 5; i++ { // read for a while after the kill
		if got := readBounded(t, filepath.Join(path2, "hello")); got != sshfsContent {
			t.Fatalf("%s after the agent's cgroup was killed: read %q, want %q", time.Since(killed).Round(time.Millisecond), got, sshfsContent)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if now := daemonsOf(t, path2); !slices.Equal(now, daemons2) || len(now) == 0 {
		t.Errorf("FUSE daemons %v before the kill, %v after", daemons2, now)
	}
	os.Remove(agentCG)
	return path2, daemons2
}

// orphanMounts leaves two mounts whose agents are gone: spec's (users ctr-a and ctr-b) by a
// Manager that closed, and spec2's by an agent whose cgroup was killed (agentMountKilled). It
// returns their paths and spec2's FUSE daemons.
func (w *sshfsWorld) orphanMounts(t *testing.T) (path, path2 string, daemons2 []int) {
	t.Helper()
	m1 := w.manager(t)
	path = w.mount(t, m1)
	if p, err := acquire(t, m1, 5*time.Second, w.spec, "ctr-b"); err != nil || p != path {
		t.Fatalf("second Acquire = %s, %v; want %s", p, err, path)
	}
	m1.Close() // its mount outlives it
	path2, daemons2 = w.agentMountKilled(t)
	for _, p := range []string{path, path2} {
		if mi := mountsAt(t, p); len(mi) != 1 {
			t.Fatalf("%d mounts at %s after their agents went, want 1", len(mi), p)
		}
	}
	return path, path2, daemons2
}

// adopt starts a new Manager over orphanMounts' mounts and acquires them again for their users
// (ctr-a and ctr-b on path, ctr-c on path2).
func (w *sshfsWorld) adopt(t *testing.T, path, path2 string) *Manager {
	t.Helper()
	m2 := w.manager(t)
	for _, a := range []struct {
		s    netspec.Spec
		user string
		want string
	}{{w.spec2, "ctr-c", path2}, {w.spec, "ctr-a", path}, {w.spec, "ctr-b", path}} {
		p, err := acquireEventually(t, m2, 5*time.Second, a.s, a.user)
		if err != nil || p != a.want {
			t.Fatalf("Acquire(%s) on the new Manager = %s, %v; want %s", a.user, p, err, a.want)
		}
	}
	return m2
}
