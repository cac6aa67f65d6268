package netmount

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// Environment of the re-executed test binary.
const (
	inNamespaceEnv = "MK_NETMOUNT_IN_NS"     // the parent's mount namespace: this is the child
	tmpEnv         = "MK_NETMOUNT_TMP"       // the parent's temporary directory, for the child
	cgroupEnv      = "MK_NETMOUNT_CG_PARENT" // cgroup parent the child must use (and remove)
	agentEnv       = "MK_NETMOUNT_AGENT"     // JSON agentConfig: run as a fake agent
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(agentEnv); cfg != "" {
		os.Exit(runFakeAgent(cfg))
	}
	os.Exit(m.Run())
}

// agentConfig configures a fake agent: a process that mounts through a Manager of its own and
// then waits to be killed, as the NRI plugin would.
type agentConfig struct {
	StateDir     string
	CgroupRoot   string
	CgroupParent string
	Spec         netspec.Spec
	Wanted       []netspec.Spec // the agent's config
}

func runFakeAgent(cfgJSON string) int {
	var cfg agentConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	m, err := NewManager(Config{StateDir: cfg.StateDir, MountTimeout: 10 * time.Second,
		Scoper: &CgroupScoper{Root: cfg.CgroupRoot, Parent: cfg.CgroupParent}, Log: log, Wanted: cfg.Wanted})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Acquire waits FirstWait (500ms) for a first attempt; on a loaded machine the mount takes
	// longer (seen: 0.6s at load 18), so ask again as the kubelet's retry would.
	path, err := m.Acquire(ctx, cfg.Spec, "agent-container")
	for err != nil && ctx.Err() == nil && strings.Contains(err.Error(), "still mounting") {
		time.Sleep(100 * time.Millisecond)
		path, err = m.Acquire(ctx, cfg.Spec, "agent-container")
	}
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("READY", path)
	select {} // until killed
}

// TestSSHFS mounts sshfs over loopback through the Manager. It mounts, so each subtest re-runs
// itself in a private mount namespace (unshare -m --propagation private), where its mounts
// vanish with the namespace; the FUSE daemons are processes, not mounts, so they and sshd run
// in cgroups below one parent of the subtest's, which is killed and removed at its end. Each
// subtest sets up what it needs (sshfsWorld), so any one runs alone: -run 'TestSSHFS/name$'.
func TestSSHFS(t *testing.T) {
	t.Run("Acquire mounts the export", func(t *testing.T) {
		w, ok := newSSHFSWorld(t)
		if !ok {
			return
		}
		m := w.manager(t)
		m.Ensure(w.spec)
		start := time.Now()
		path, err := acquireEventually(t, m, 15*time.Second, w.spec, "ctr-a")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("mounted %s at %s in %s", w.spec, path, time.Since(start).Round(time.Millisecond))
		if got := readBounded(t, filepath.Join(path, "hello")); got != sshfsContent {
			t.Errorf("read %q through the mount, want %q", got, sshfsContent)
		}
		if mi := mountsAt(t, path); len(mi) != 1 || mi[0].FSType != "fuse.sshfs" {
			t.Errorf("mountinfo at %s: %+v, want one fuse.sshfs mount", path, mi)
		}
		if mp := mountsAt(t, filepath.Join(w.stateDir, "mounts")); len(mp) != 1 || !strings.Contains(mp[0].Optional, "shared:") {
			t.Errorf("mounts directory: %+v, want a shared mount of its own", mp)
		}
	})

	t.Run("a second user makes no second mount", func(t *testing.T) {
		w, ok := newSSHFSWorld(t)
		if !ok {
			return
		}
		m := w.manager(t)
		path := w.mount(t, m)
		p, err := acquire(t, m, 5*time.Second, w.spec, "ctr-b")
		if err != nil || p != path {
			t.Fatalf("second Acquire = %s, %v; want %s", p, err, path)
		}
		if mi := mountsAt(t, path); len(mi) != 1 {
			t.Errorf("%d mounts at %s after two users, want 1", len(mi), path)
		}
		if d := daemonsOf(t, path); len(d) != 1 {
			t.Errorf("%d FUSE daemons for %s, want 1: %v", len(d), path, d)
		}
	})

	t.Run("the FUSE daemon runs in the mount's scope", func(t *testing.T) {
		w, ok := newSSHFSWorld(t)
		if !ok {
			return
		}
		path := w.mount(t, w.manager(t))
		self, err := testsupport.CgroupV2(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		daemons := daemonsOf(t, path)
		if len(daemons) == 0 {
			t.Fatal("no FUSE daemon found for the mount")
		}
		for _, pid := range daemons {
			cg, err := testsupport.CgroupV2(pid)
			if err != nil {
				t.Fatal(err)
			}
			if cg != w.scopeOf(w.spec) || cg == self {
				t.Errorf("FUSE daemon %d is in cgroup %s, want the scope %s (the test runs in %s)", pid, cg, w.scopeOf(w.spec), self)
			}
			if sid, _ := unix.Getsid(pid); sid == mySid() {
				t.Errorf("FUSE daemon %d is in the test's session %d", pid, sid)
			}
		}
		procs := cgroupProcs(t, w.sc.Dir("mount-"+w.spec.Key()))
		var ssh bool
		for _, pid := range procs {
			ssh = ssh || comm(pid) == "ssh"
		}
		if !ssh {
			t.Errorf("the scope's processes %v have no ssh: the daemon's connection runs elsewhere", procs)
		}
	})

	t.Run("probes of a mount whose daemon hangs leave one stat behind, not one each", func(t *testing.T) {
		w, ok := newSSHFSWorld(t)
		if !ok {
			return
		}
		path := w.mount(t, w.manager(t))
		daemons := daemonsOf(t, path)
		if len(daemons) == 0 {
			t.Fatalf("no FUSE daemon serves %s", path)
		}
		for _, pid := range daemons {
			syscall.Kill(pid, syscall.SIGSTOP)
		}
		// kill returns before every thread has stopped: a daemon thread already running can
		// still answer the first lookup (it did once, under load). Probe once all have.
		eventually(t, "the FUSE daemon's threads are stopped", func() bool {
			return !slices.ContainsFunc(daemons, func(pid int) bool { return !stopped(pid) })
		})
		resumed := false
		resume := func() {
			if !resumed {
				for _, pid := range daemons {
					syscall.Kill(pid, syscall.SIGCONT)
				}
				resumed = true
			}
		}
		defer resume()
		l := &liveSystem{}
		target := filepath.Join(path, "not-cached") // a lookup the stopped daemon must answer
		before := runtime.NumGoroutine()
		for i := range 20 {
			if err := l.probe(w.spec, target); !errors.Is(err, bounded.ErrNoAnswer) {
				t.Fatalf("probe %d of the hung mount = %v, want no answer", i, err)
			}
		}
		if grown := runtime.NumGoroutine() - before; grown > 1 {
			t.Errorf("20 probes of the hung mount left %d goroutines behind, want at most the one stuck stat", grown)
		}
		resume()
		eventually(t, "a probe after SIGCONT answers not-exist", func() bool {
			return errors.Is(l.probe(w.spec, target), os.ErrNotExist)
		})
	})

	// The restart scenario: an agent in a cgroup of its own mounts, then its whole cgroup is
	// killed. The mount lives on, and a new Manager adopts it.
	t.Run("the mount survives cgroup.kill of the agent's cgroup", func(t *testing.T) {
		w, ok := newSSHFSWorld(t)
		if !ok {
			return
		}
		w.agentMountKilled(t)
	})

	t.Run("a new Manager adopts the live mounts", func(t *testing.T) {
		w, ok := newSSHFSWorld(t)
		if !ok {
			return
		}
		path, path2, _ := w.orphanMounts(t)
		before := append(daemonsOf(t, path), daemonsOf(t, path2)...)
		start := time.Now()
		w.adopt(t, path, path2)
		t.Logf("adopted and acquired in %s", time.Since(start).Round(time.Millisecond))
		for _, p := range []string{path, path2} {
			if mi := mountsAt(t, p); len(mi) != 1 {
				t.Errorf("%d mounts at %s after adoption, want 1 (mounted again?)", len(mi), p)
			}
		}
		if after := append(daemonsOf(t, path), daemonsOf(t, path2)...); !slices.Equal(before, after) {
			t.Errorf("FUSE daemons %v before adoption, %v after: mounted again", before, after)
		}
		if got := readBounded(t, filepath.Join(path2, "hello")); got != sshfsContent {
			t.Errorf("read %q through the adopted mount", got)
		}
	})

	t.Run("the last release unmounts after the grace period", func(t *testing.T) {
		w, ok := newSSHFSWorld(t)
		if !ok {
			return
		}
		path, path2, daemons2 := w.orphanMounts(t)
		m2 := w.adopt(t, path, path2)
		m2.Release("ctr-a")
		time.Sleep(2 * sshfsGrace)
		if mi := mountsAt(t, path); len(mi) != 1 {
			t.Fatalf("unmounted while ctr-b still uses it")
		}
		daemons := daemonsOf(t, path)
		released := time.Now()
		m2.Release("ctr-b")
		m2.Release("ctr-c")
		var gone time.Duration
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if len(mountsAt(t, path)) == 0 && len(mountsAt(t, path2)) == 0 {
				gone = time.Since(released)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("still mounted 10s after the last release")
			}
		}
		t.Logf("unmounted %s after the last release (grace %s)", gone.Round(time.Millisecond), sshfsGrace)
		if gone < sshfsGrace {
			t.Errorf("unmounted %s after the last release, within the %s grace period", gone, sshfsGrace)
		}
		eventually(t, "the Manager forgets the unmounted mounts", func() bool {
			_, ok1 := statusOf(m2, w.spec.Key())
			_, ok2 := statusOf(m2, w.spec2.Key())
			return !ok1 && !ok2
		})
		for _, s := range []netspec.Spec{w.spec, w.spec2} {
			if _, err := os.Stat(filepath.Join(w.stateDir, "state", s.Key()+".json")); !os.IsNotExist(err) {
				t.Errorf("state of %s left after its unmount: %v", s.Key(), err)
			}
		}
		eventually(t, "the FUSE daemons exit and their scopes are removed", func() bool {
			for _, pid := range append(daemons, daemons2...) {
				if alive(pid) {
					return false
				}
			}
			_, err1 := os.Stat(w.sc.Dir("mount-" + w.spec.Key()))
			_, err2 := os.Stat(w.sc.Dir("mount-" + w.spec2.Key()))
			return os.IsNotExist(err1) && os.IsNotExist(err2)
		})
	})

	t.Run("a dead server fails inside the budget, and the background retry mounts", func(t *testing.T) {
		w, ok := newSSHFSWorld(t)
		if !ok {
			return
		}
		m := w.manager(t)
		port2 := freePort(t)
		dead := w.sshSpec(port2)
		start := time.Now()
		_, err := acquire(t, m, time.Second, dead, "ctr-d")
		took := time.Since(start)
		t.Logf("Acquire against a dead server: %s after %s", err, took.Round(time.Millisecond))
		if err == nil || !strings.HasPrefix(err.Error(), dead.String()+": not ready: ") || !strings.Contains(err.Error(), "port="+strconv.Itoa(port2)) {
			t.Errorf("Acquire against a dead server = %v, want '<spec>: not ready: ...'", err)
		}
		if took > 1500*time.Millisecond { // 500ms of slack for a loaded machine
			t.Errorf("Acquire with a 1s budget took %s", took)
		}
		// sshfs run by mount(8) reports a refused connection as "read: Connection reset by
		// peer" or "write: Broken pipe" (ssh's own "Connection refused" only shows with -d).
		if err == nil || !regexp.MustCompile(`last error: mount: exit status 1: (read|write): \S`).MatchString(err.Error()) {
			t.Errorf("the error does not carry the helper's message: %v", err)
		}

		startSSHD(t, w.sc, w.keys, port2)
		p, err := acquireEventually(t, m, 40*time.Second, dead, "ctr-d")
		if err != nil {
			t.Fatalf("Acquire once the server is up: %v", err)
		}
		st, _ := statusOf(m, dead.Key())
		t.Logf("mounted after the server came up, %s after the first Acquire, attempt %d", time.Since(start).Round(time.Millisecond), st.Attempt)
		if st.Attempt < 2 {
			t.Errorf("mounted at attempt %d, want a retry", st.Attempt)
		}
		if got := readBounded(t, filepath.Join(p, "hello")); got != sshfsContent {
			t.Errorf("read %q", got)
		}
	})

	t.Run("an nfs mount fails the preflight on a node without mount.nfs", func(t *testing.T) {
		// Asked before the re-run: a subtest skipped in the private namespace would not pass there.
		if _, err := (LiveEnv{}).LookHelper("mount.nfs"); err == nil {
			testenv.Skip(t, "this node has mount.nfs: the preflight would pass its helper check")
		}
		w, ok := newSSHFSWorld(t)
		if !ok {
			return
		}
		m := w.manager(t)
		nfs := netspec.Spec{Type: "nfs", Source: "127.0.0.1:/export"}
		start := time.Now()
		_, err := acquire(t, m, 5*time.Second, nfs, "ctr-e")
		if took := time.Since(start); took > 3*time.Second { // far below the 5s deadline
			t.Errorf("Acquire took %s for a node that lacks the helper", took)
		}
		for _, want := range []string{"nfs 127.0.0.1:/export: not ready: last error: ", "mount.nfs", "install nfs-common (Debian/Ubuntu) or nfs-utils (RHEL/Fedora)"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Acquire(nfs) = %v, want it to contain %q", err, want)
			}
		}
		t.Logf("Acquire(nfs): %v", err)
	})

	// kubernetes #48431: a FUSE daemon died with its agent; the mount is left behind, dead. A
	// new agent must not adopt it as it is.
	t.Run("a new Manager mounts again a mount whose FUSE daemon died", func(t *testing.T) {
		w, ok := newSSHFSWorld(t)
		if !ok {
			return
		}
		// A mount of a spec that no Wanted of cfg names, from a server of its own, left by
		// a Manager that is gone.
		port2 := freePort(t)
		startSSHD(t, w.sc, w.keys, port2)
		dead := w.sshSpec(port2)
		m2 := w.manager(t)
		deadPath, err := acquireEventually(t, m2, 15*time.Second, dead, "ctr-d")
		if err != nil {
			t.Fatal(err)
		}
		m2.Close()
		old := daemonsOf(t, deadPath)
		if len(old) == 0 {
			t.Fatal("no FUSE daemon to kill")
		}
		for _, pid := range old {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		eventually(t, "the FUSE daemon is dead", func() bool {
			_, err := os.Stat(deadPath)
			return errors.Is(err, syscall.ENOTCONN)
		})
		m3 := w.manager(t)
		start := time.Now()
		p, err := acquireEventually(t, m3, 15*time.Second, dead, "ctr-d")
		if err != nil || p != deadPath {
			t.Fatalf("Acquire over a dead mount = %s, %v; want %s", p, err, deadPath)
		}
		t.Logf("dead mount replaced in %s", time.Since(start).Round(time.Millisecond))
		if got := readBounded(t, filepath.Join(p, "hello")); got != sshfsContent {
			t.Errorf("read %q through the new mount", got)
		}
		if mi := mountsAt(t, p); len(mi) != 1 {
			t.Errorf("%d mounts at %s, want 1 (the dead one unmounted, a new one mounted)", len(mi), p)
		}
		// The dead mount, adopted at start-up although no spec of cfg names it, is
		// replaced in place (heal.go): its daemon's command line names the staging directory,
		// so it is found in the mount's scope.
		var now []int
		for _, pid := range cgroupProcs(t, filepath.Join(w.sc.Root, w.scopeOf(dead))) {
			if comm(pid) != "ssh" { // sshfs runs as mount.fuse.sshfs; its ssh child is no daemon
				now = append(now, pid)
			}
		}
		if len(now) != 1 || slices.Contains(old, now[0]) {
			t.Errorf("FUSE daemons %v, want one new one (the dead ones were %v)", now, old)
		}
	})
}

// inPrivateNamespace re-runs the test in a private mount namespace of its own and returns
// false (the caller returns at once), or, in that re-run, returns its temp dir and the
// CgroupScoper its mounts use. It refuses to go on in the namespace it was started from.
func inPrivateNamespace(t *testing.T) (tmp string, sc *CgroupScoper, ok bool) {
	parentNS := os.Getenv(inNamespaceEnv)
	if parentNS == "" {
		reexecInPrivateNamespace(t)
		return "", nil, false
	}
	if ns, err := os.Readlink("/proc/self/ns/mnt"); err != nil || ns == parentNS {
		t.Fatalf("%s is set but this is not a new mount namespace (%s, %v): refusing to mount", inNamespaceEnv, ns, err)
	}
	return os.Getenv(tmpEnv), childCgroupScoper(t), true
}

// childCgroupScoper is the CgroupScoper under the parent the outer test chose; at the end it
// kills every process below it (FUSE daemons, sshd) and removes it.
func childCgroupScoper(t *testing.T) *CgroupScoper {
	root, err := liveCgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	sc := &CgroupScoper{Root: root, Parent: os.Getenv(cgroupEnv)}
	if err := os.Mkdir(filepath.Join(root, sc.Parent), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := emergencyCleanup(filepath.Join(root, sc.Parent), os.Getenv(tmpEnv)); err != nil {
			t.Error(err)
		}
	})
	return sc
}

// emergencyCleanup kills every process below the cgroup dir (FUSE daemons, sshd, the fake
// agent), removes the cgroups, and unmounts lazily what is mounted below tmp.
func emergencyCleanup(cgroupDir, tmp string) error {
	err := endCgroupTree(cgroupDir)
	infos, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(tmp))
	for i := len(infos) - 1; i >= 0; i-- {
		exec.Command("umount", "-l", infos[i].Mountpoint).Run()
	}
	return err
}

func testLogger(t *testing.T) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(testWriter{t})
	l.SetLevel(logrus.DebugLevel)
	return l
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// startSSHD runs sshd on 127.0.0.1:port in a cgroup of its own below sc's parent (so that its
// per-connection children die with it), serving SFTP to root with the key in keys.
func startSSHD(t *testing.T, sc *CgroupScoper, keys string, port int) {
	t.Helper()
	sshd := testsupport.NewSSHD(keys, port, filepath.Join(sc.Root, sc.Parent, "sshd-"+strconv.Itoa(port)),
		filepath.Join(filepath.Dir(keys), "sshd-"+strconv.Itoa(port)+".log"))
	t.Cleanup(func() {
		sshd.Stop()
		if t.Failed() {
			if log, err := os.ReadFile(sshd.Log()); err == nil {
				t.Logf("sshd on port %d:\n%s", port, log)
			}
		}
	})
	if err := sshd.Start(); err != nil {
		t.Fatal(err)
	}
}

// startInCgroup starts argv in cgroup dir (placed there by clone3) and returns it with a
// channel that gets its first line of output.
func startInCgroup(t *testing.T, dir string, env []string, argv ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = testWriter{t}
	if err := harness.StartInCgroup(cmd, dir); err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case first <- sc.Text():
			default:
			}
		}
	}()
	return cmd, first
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := testsupport.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// readBounded reads a file through a network mount, failing the test instead of hanging.
func readBounded(t *testing.T, path string) string {
	t.Helper()
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := os.ReadFile(path)
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Errorf("read %s: %v", path, r.err)
		}
		return string(r.data)
	case <-time.After(5 * time.Second):
		t.Errorf("read %s: no answer within 5s", path)
		return ""
	}
}

// mountsAt returns every mountinfo entry whose mount point is path (stacked mounts count).
func mountsAt(t *testing.T, path string) []*mountinfo.Info {
	t.Helper()
	infos, err := testsupport.MountsAt(path)
	if err != nil {
		t.Fatal(err)
	}
	return infos
}

// daemonsOf returns the processes whose command line names path: the FUSE daemon serving it
// (and, while mounting, the helper), sorted.
func daemonsOf(t *testing.T, path string) []int {
	t.Helper()
	var pids []int
	for _, pid := range allPids() {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && slices.Contains(strings.Split(string(cmdline), "\x00"), path) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stopped says whether every thread of pid is in the stopped state (T in /proc/<pid>/task/*/stat).
func stopped(pid int) bool {
	stats, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
	for _, f := range stats {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that went
		}
		i := bytes.LastIndexByte(data, ')')
		if i < 0 || len(data) < i+3 || (data[i+2] != 'T' && data[i+2] != 't') {
			return false
		}
	}
	return len(stats) > 0
}

func comm(pid int) string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(data))
}

func cgroupProcs(t *testing.T, dir string) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatalf("read the processes of cgroup %s: %v", dir, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// reexecInPrivateNamespace runs this test again in a private mount namespace and checks that
// nothing it started outlives it: no process naming its directory, no cgroup.
func reexecInPrivateNamespace(t *testing.T) {
	testenv.Require(t, "root")
	for _, prog := range []string{"unshare", "mount", "umount", "sshd", "sshfs", "ssh-keygen"} {
		if _, err := lookPath(prog); err != nil {
			testenv.Skip(t, "%s not found: %v", prog, err)
		}
	}
	if err := Preflight(LiveEnv{}, netspec.Spec{Type: "fuse.sshfs", Source: "h:/"}); err != nil {
		testenv.Skip(t, "this node cannot mount sshfs: %v", err)
	}
	if out, err := exec.Command("unshare", "-m", "--propagation", "private", "true").CombinedOutput(); err != nil {
		testenv.Skip(t, "cannot create a mount namespace here: %v: %s", err, out)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	root, err := cgroup2Root(mi)
	if err != nil {
		testenv.Skip(t, "%v", err)
	}
	ns, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its name comes from the subtest's, whose commas would split the sshfs
	// options that name files below it.
	tmp, err := os.MkdirTemp("", "mk-netmount-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	parent := fmt.Sprintf("mountkeeper-test-%d-%d.slice", os.Getpid(), time.Now().UnixNano())
	parentDir := filepath.Join(root, parent)
	t.Cleanup(func() {
		if _, err := os.Stat(parentDir); err == nil {
			t.Errorf("the test left cgroup %s: removing it", parentDir)
			removeCgroupTree(t, parentDir)
		}
		for _, pid := range allPids() {
			cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if strings.Contains(string(cmdline), tmp) && alive(pid) {
				t.Errorf("process %d outlived the test: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})

	// The child must end, and clean up, before this test's own deadline.
	budget := 3 * time.Minute
	if d, ok := t.Deadline(); ok {
		budget = min(budget, time.Until(d)-20*time.Second)
	}
	if budget < 30*time.Second {
		t.Fatalf("only %s left for the test: run it with a longer -timeout", budget)
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-m", "--propagation", "private",
		os.Args[0], "-test.run="+runPattern(t.Name()), "-test.v", "-test.count=1", "-test.timeout="+budget.String())
	cmd.Env = append(os.Environ(), inNamespaceEnv+"="+ns, tmpEnv+"="+tmp, cgroupEnv+"="+parent)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a private mount namespace failed: %v\n%s", t.Name(), err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s did not run in the private mount namespace:\n%s", t.Name(), out)
	}
	t.Logf("in a private mount namespace (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
}

func mySid() int {
	sid, _ := unix.Getsid(0)
	return sid
}

// runPattern is the -test.run pattern that selects the test or subtest named name alone: each
// element of the name quoted (subtest names hold dots and parentheses) and anchored.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
