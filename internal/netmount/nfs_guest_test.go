//go:build guestnfs

package netmount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// These tests mount NFS for real through the Manager, mount(8) and mount.nfs. They need a
// kernel nfsd serving 127.0.0.1:/export: the guest of test/vm's TestNFS (nfs_test.go there)
// sets that up and runs them; the host never compiles them (build tag guestnfs). A node
// without the client is test/e2e's TestGuestNFSDeadServer's, which runs before them.

// guestNFSEnv is set by the guest once its nfsd serves /export; its value is the directory
// holding the unpacked client (usr/sbin/mount.nfs and what it runs).
const guestNFSEnv = "MOUNTKEEPER_GUEST_NFS_ROOT"

const nfsContent = "served by the guest's nfsd\n"

// guestNFS fails t outside the NFS guest; inside, it installs the NFS client if it is not yet,
// and returns the directory holding it.
func guestNFS(t *testing.T) (clientRoot string) {
	t.Helper()
	root := os.Getenv(guestNFSEnv)
	if root == "" {
		t.Fatalf("%s is not set: these tests run in test/vm's NFS guest only", guestNFSEnv)
	}
	testsupport.InstallNFSClient(t, root)
	return root
}

// nfsManager is a Manager with the guest tests' usual timings (nfsManagerIn).
func nfsManager(t *testing.T, grace time.Duration, wanted ...netspec.Spec) (*Manager, *CgroupScoper) {
	t.Helper()
	return nfsManagerIn(t, "mountkeeper-nfs-test.slice", Config{Grace: grace, MountTimeout: 60 * time.Second,
		RetryBackoff: 200 * time.Millisecond, FirstWait: 100 * time.Millisecond, Wanted: wanted})
}

// nfsManagerIn is a Manager of cfg with its mount scopes under a cgroup of the test's own
// (parent), its state in a temporary directory, both removed (and checked empty) at the end.
func nfsManagerIn(t *testing.T, parent string, cfg Config) (*Manager, *CgroupScoper) {
	t.Helper()
	root, err := liveCgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	sc := &CgroupScoper{Root: root, Parent: parent}
	if err := os.MkdirAll(filepath.Join(root, sc.Parent), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir, cfg.Scoper, cfg.Log = t.TempDir(), sc, testLogger(t)
	m, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		if err := emergencyCleanup(filepath.Join(root, sc.Parent), cfg.StateDir); err != nil {
			t.Error(err)
		}
	})
	return m, sc
}

// scopesLeft lists the mount scopes (cgroups) below sc's parent.
func scopesLeft(t *testing.T, sc *CgroupScoper) []string {
	t.Helper()
	units, err := sc.Units()
	if err != nil {
		t.Fatal(err)
	}
	return units
}

// waitGone waits until nothing is mounted at path and no scope is left below sc's parent.
func waitGone(t *testing.T, m *Manager, sc *CgroupScoper, path string, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		mounted := len(mountsAt(t, path)) > 0
		var scopes []string
		for _, u := range scopesLeft(t, sc) {
			// The node's rpc.statd stays, in its own scope, with the daemon in it.
			if u != statdUnit || len(cgroupProcs(t, sc.Dir(u))) == 0 {
				scopes = append(scopes, u)
			}
		}
		if !mounted && len(scopes) == 0 {
			t.Logf("released: nothing mounted at %s, no scope left, %s after the last release",
				path, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s after the last release: mounted at %s: %v, scopes left: %v", timeout, path, mounted, scopes)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestNFSGuestShared: for NFSv4.2 and NFSv3, two claims share one host mount; after the last
// release and the grace period nothing is mounted and no scope is left.
func TestNFSGuestShared(t *testing.T) {
	guestNFS(t)
	for _, c := range []struct {
		name string
		spec netspec.Spec
	}{
		{"v4.2", netspec.Spec{Type: "nfs", Source: "127.0.0.1:/", Options: []string{"vers=4.2"}}},
		{"v3", netspec.Spec{Type: "nfs", Source: "127.0.0.1:/export", Options: []string{"vers=3"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const grace = 500 * time.Millisecond
			m, sc := nfsManager(t, grace, c.spec)
			m.Ensure(c.spec)
			start := time.Now()
			path, err := acquireEventually(t, m, 60*time.Second, c.spec, "ctr-a")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("mounted %s in %s", c.spec, time.Since(start).Round(time.Millisecond))
			p2, err := acquire(t, m, 5*time.Second, c.spec, "ctr-b")
			if err != nil || p2 != path {
				t.Fatalf("second claim = %s, %v; want %s", p2, err, path)
			}
			for _, u := range scopesLeft(t, sc) {
				if u != statdUnit {
					t.Errorf("scope %s is left while mounted: a kernel mount's scope is removed once mount.nfs has exited (processes: %v)",
						u, cgroupProcs(t, sc.Dir(u)))
				}
			}
			mi := mountsAt(t, path)
			if len(mi) != 1 || !strings.HasPrefix(mi[0].FSType, "nfs") {
				t.Fatalf("mountinfo at %s: %+v; want one nfs mount", path, mi)
			}
			if got := readBounded(t, filepath.Join(path, "hello")); got != nfsContent {
				t.Errorf("read %q, want %q", got, nfsContent)
			}
			m.Release("ctr-a")
			time.Sleep(2 * grace)
			if len(mountsAt(t, path)) != 1 {
				t.Fatalf("released with a claim left: %s is no longer mounted", path)
			}
			m.Release("ctr-b")
			waitGone(t, m, sc, path, 30*time.Second)
		})
	}
}

// TestNFSGuestStatd: the rpc.statd the first NFSv3 mount needs runs in a scope of its own,
// not in that mount's; it survives the release of that mount, and a second v3 mount (another
// key) uses it: a POSIX lock through the mount (NLM, which needs statd) is granted.
func TestNFSGuestStatd(t *testing.T) {
	guestNFS(t)
	if pid := testsupport.StatdPid(); pid != 0 {
		t.Logf("killing the rpc.statd (%d) an earlier test left, so that this one starts its own", pid)
		unix.Kill(pid, unix.SIGKILL)
		for testsupport.StatdPid() != 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	first := netspec.Spec{Type: "nfs", Source: "127.0.0.1:/export", Options: []string{"vers=3"}}
	second := netspec.Spec{Type: "nfs", Source: "127.0.0.1:/export", Options: []string{"vers=3", "actimeo=1"}}
	const grace = 300 * time.Millisecond
	m, sc := nfsManager(t, grace, first, second)
	path, err := acquireEventually(t, m, 60*time.Second, first, "ctr-a")
	if err != nil {
		t.Fatal(err)
	}
	pid := testsupport.StatdPid()
	if pid == 0 {
		t.Fatal("no rpc.statd runs after an NFSv3 mount")
	}
	cg, err := testsupport.CgroupV2(pid)
	if err != nil {
		t.Fatal(err)
	}
	want := "/" + sc.Parent + "/" + statdUnit
	if cg != want {
		t.Fatalf("rpc.statd (%d) runs in cgroup %s, want %s (its own, not the mount's %s)", pid, cg, want, unitFor(first.Key()))
	}
	m.Release("ctr-a")
	waitGone(t, m, sc, path, 30*time.Second)
	if testsupport.StatdPid() != pid {
		t.Fatalf("rpc.statd (%d) did not survive the release of the mount that started it", pid)
	}
	path2, err := acquireEventually(t, m, 60*time.Second, second, "ctr-b")
	if err != nil {
		t.Fatal(err)
	}
	if got := testsupport.StatdPid(); got != pid {
		t.Errorf("the second v3 mount runs rpc.statd %d, want the first one's %d", got, pid)
	}
	f, err := os.OpenFile(filepath.Join(path2, "lockfile"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	start := time.Now()
	err = unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
	f.Close()
	if err != nil {
		t.Errorf("a POSIX lock on the second v3 mount: %v", err)
	} else {
		t.Logf("POSIX lock granted over NLM in %s", time.Since(start).Round(time.Millisecond))
	}
	m.Release("ctr-b")
	waitGone(t, m, sc, path2, 30*time.Second)
}

// TestNFSGuestStale: the export removed and made anew under a held NFSv4.2 or NFSv3 mount, as
// after a server failover to another filesystem: the client's file handle of the mount's root
// names a filesystem the server no longer has (ESTALE, which a plain mount shows). The prober
// finds the held mount dead and mounts anew in its place; a container's rslave bind of it,
// made before, reads the new export's data without being made anew.
func TestNFSGuestStale(t *testing.T) {
	root := guestNFS(t)
	for _, c := range []struct {
		vers   string
		export string    // the export as the client names it
		fsids  [2]string // the filesystem ids before and after the failover
	}{
		{"4.2", "127.0.0.1:/stale", [2]string{"101", "102"}},
		{"3", "127.0.0.1:/export/stale", [2]string{"103", "104"}},
	} {
		t.Run("NFSv"+c.vers, func(t *testing.T) {
			export := testsupport.NewNFSExport(t, "/export/stale", filepath.Join(root, "usr", "sbin", "exportfs"))
			export.Serve(t, nfsContent, c.fsids[0])

			spec := netspec.Spec{Type: "nfs", Source: c.export, Options: []string{"vers=" + c.vers}}
			m, sc := nfsManagerIn(t, "mountkeeper-nfs-stale.slice", Config{Grace: 200 * time.Millisecond, MountTimeout: 20 * time.Second,
				RetryBackoff: 200 * time.Millisecond, FirstWait: 100 * time.Millisecond, ProbeInterval: 200 * time.Millisecond,
				Uses: map[string][]Use{spec.Key(): {{Class: "c", Propagation: "rslave"}}}, Wanted: []netspec.Spec{spec}})
			path, err := acquireEventually(t, m, 60*time.Second, spec, "ctr-a")
			if err != nil {
				t.Fatal(err)
			}
			// A container's class mount: an rbind of the host path, made rslave.
			ctrs := t.TempDir()
			ctr := filepath.Join(ctrs, "a")
			if err := os.MkdirAll(ctr, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := makePrivateDir(ctrs); err != nil {
				t.Fatal(err)
			}
			// A plain mount of the same export, not held by the Manager: it shows what the kernel
			// client answers once the export is made anew (it shares the held mount's superblock, so
			// it is asked nothing before the held mount is found dead).
			plain := filepath.Join(ctrs, "plain")
			if err := os.Mkdir(plain, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				unix.Unmount(ctr, unix.MNT_DETACH)
				unix.Unmount(plain, unix.MNT_DETACH)
				unix.Unmount(ctrs, unix.MNT_DETACH)
			})
			if err := unix.Mount(path, ctr, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("", ctr, "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
				t.Fatal(err)
			}
			testsupport.Run(t, "mount", "-t", "nfs", "-o", "vers="+c.vers, c.export, plain)
			if got := readBounded(t, filepath.Join(ctr, "hello")); got != nfsContent {
				t.Fatalf("the container's bind reads %q, want %q", got, nfsContent)
			}
			before := m.Totals()

			// The failover: another filesystem with other content (and another id) takes the export's
			// place in one step: mounted over the old one, then the export table swapped by one
			// `exportfs -ra`. With the export removed first, a heal that came between the steps
			// mounted the bare directory below it, and read nothing there.
			const failedOver = "served after the failover\n"
			start := time.Now() // the failover's start: the prober may find the mount dead before it ends
			export.Serve(t, failedOver, c.fsids[1])
			t.Logf("export removed and re-created in %s", time.Since(start).Round(time.Millisecond))

			statRoot := func(p string) error {
				done := make(chan error, 1)
				go func() {
					var stx unix.Statx_t
					done <- unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_FORCE_SYNC, unix.STATX_MODE, &stx)
				}()
				select {
				case err := <-done:
					return err
				case <-time.After(5 * time.Second):
					return errors.New("no answer within 5s")
				}
			}
			// Nothing reads below the mount until it is found dead: an idle container's mount must be
			// found dead too (a read below it would make the client fetch the root's attributes anew).
			for m.Totals().Deaths == before.Deaths {
				if time.Since(start) > 10*time.Second {
					t.Fatalf("the held mount is not found dead 10s after its export was re-created; status %+v", m.Status())
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("found dead %s after the failover began", time.Since(start).Round(time.Millisecond))
			_, cachedErr := os.Stat(plain)
			if err := statRoot(plain); !errors.Is(err, unix.ESTALE) {
				t.Fatalf("a plain mount of the re-created export answers %v to a stat of its root, want ESTALE: the test does not make the handle stale", err)
			}
			_, readErr := os.ReadFile(filepath.Join(plain, "hello"))
			t.Logf("the plain mount's root: ESTALE (a stat from the attribute cache: %v; a read below it: %v)", cachedErr, readErr)

			readsNew := func() bool {
				done := make(chan string, 1)
				go func() { b, _ := os.ReadFile(filepath.Join(ctr, "hello")); done <- string(b) }()
				select {
				case got := <-done:
					return got == failedOver
				case <-time.After(5 * time.Second):
					return false
				}
			}
			for !readsNew() {
				if time.Since(start) > 20*time.Second {
					t.Fatalf("the container's bind does not read the re-created export 20s later; totals %+v, status %+v", m.Totals(), m.Status())
				}
				time.Sleep(50 * time.Millisecond)
			}
			readAgain := time.Since(start)
			eventually(t, "status mounted after the recovery", func() bool {
				st := m.Status()[0]
				return st.State == "mounted" && st.Recoveries > 0
			})
			st := m.Status()[0]
			var detected, healed time.Duration
			if st.LastDeath != nil && st.LastRecovery != nil {
				detected, healed = st.LastDeath.Sub(start), st.LastRecovery.Sub(*st.LastDeath)
			}
			m.mu.Lock()
			cause := m.entries[spec.Key()].heal.lastCause
			m.mu.Unlock()
			if cause == nil || !errors.Is(cause, unix.ESTALE) || !strings.Contains(cause.Error(), "re-created") {
				t.Errorf("the death's cause is %v, want ESTALE said to be a re-created export", cause)
			}
			tot := m.Totals()
			if tot.Deaths != before.Deaths+1 || tot.Recoveries != before.Recoveries+1 {
				t.Errorf("totals %+v after one failover, before %+v: want one death and one recovery more", tot, before)
			}
			if n := len(mountsAt(t, path)); n != 1 {
				t.Errorf("%d mounts at the host path after the heal, want 1", n)
			}
			t.Logf("ESTALE: found dead %s after the failover began (prober every 200ms), new mount in place %s later; the container's rslave bind reads the new export %s after the failover began; cause %v; totals %+v",
				detected.Round(time.Millisecond), healed.Round(time.Millisecond), readAgain.Round(time.Millisecond), cause, tot)
			m.Release("ctr-a")
			waitGone(t, m, sc, path, 30*time.Second)
		})
	}
}

// dStateTasks counts the threads of this process in uninterruptible sleep (D).
func dStateTasks(t *testing.T) int {
	t.Helper()
	n, err := testsupport.DStateThreads(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// stuckTotal sums the Manager's stuck calls over its servers.
func stuckTotal(m *Manager) int {
	n := 0
	for _, c := range m.Totals().StuckCalls {
		n += c
	}
	return n
}

// statChild stats path in a child process, killed after limit: a reader of the test's own
// that leaves no thread of the test process in D state. Its exit is on the channel.
func statChild(t *testing.T, path string, limit time.Duration) <-chan error {
	t.Helper()
	cmd := exec.Command("timeout", "-s", "KILL", strconv.Itoa(int(limit.Seconds())), "stat", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done, exited := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited // the caller may have taken the exit from done
	})
	return done
}

// TestNFSGuestDeadServer: nfsd stopped under three hard NFSv4.2 mounts of one server (other
// options each), in use by readers (child processes). The Manager's threads stuck on the
// server stay at one (the bound: one stuck probe per server) over many probe intervals, and
// are what Totals counts. A new claim of another mount of that server is refused within the
// create budget naming the server; the release of a dead mount returns at once and the mount
// goes (umount, then umount -l after UnmountTimeout). nfsd started again: the held mounts
// answer, the stuck count drops to 0, a new claim succeeds (timed). nfsd stopped again: Close
// returns in time though a thread is stuck. It runs last: it stops the guest's nfsd, and
// starts it again at the end.
func TestNFSGuestDeadServer(t *testing.T) {
	root := guestNFS(t)
	nfsd := func(threads string) {
		t.Helper()
		if out, err := exec.Command(filepath.Join(root, "usr", "sbin", "rpc.nfsd"), threads).CombinedOutput(); err != nil {
			t.Fatalf("rpc.nfsd %s: %v: %s", threads, err, out)
		}
	}
	spec := func(opts ...string) netspec.Spec {
		return netspec.Spec{Type: "nfs", Source: "127.0.0.1:/", Options: append([]string{"vers=4.2", "noac"}, opts...)}
	}
	held := []netspec.Spec{spec(), spec("nosuid"), spec("nodev"), spec("noexec")}
	b := spec("ro")
	const unmountTimeout = 3 * time.Second
	const probeInterval = 300 * time.Millisecond
	m, _ := nfsManagerIn(t, "mountkeeper-nfs-dead.slice", Config{Grace: 200 * time.Millisecond, MountTimeout: 20 * time.Second,
		UnmountTimeout: unmountTimeout, RetryBackoff: time.Second, FirstWait: 100 * time.Millisecond,
		Wanted: append(slices.Clone(held), b)})
	// Registered after the Manager's cleanup, so it runs first: nfsd serves again before the
	// Manager closes.
	stopped := false
	t.Cleanup(func() {
		if stopped {
			nfsd("8")
		}
	})
	var paths []string
	for i, s := range held {
		path, err := acquireEventually(t, m, 60*time.Second, s, fmt.Sprint("ctr-", i))
		if err != nil {
			t.Fatal(err)
		}
		if got := readBounded(t, filepath.Join(path, "hello")); got != nfsContent {
			t.Fatalf("read %q, want %q", got, nfsContent)
		}
		paths = append(paths, path)
	}
	m.ReleaseUnused() // the running containers' claims are known, as the plugin says after its sync
	path := paths[0]
	before := dStateTasks(t)
	nfsd("0")
	stopped = true
	stoppedAt := time.Now()
	for _, p := range paths {
		statChild(t, filepath.Join(p, "hello"), 60*time.Second) // hangs: a hard mount, the server gone
	}

	// The create budget: the runtime's 2 s NRI request timeout.
	const budget = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	start := time.Now()
	_, err := m.Acquire(ctx, b, "ctr-b")
	cancel()
	took := time.Since(start)
	if err == nil {
		t.Fatal("a claim of a new mount of the stopped server succeeded")
	}
	if took > budget {
		t.Errorf("the claim took %s, more than the create budget %s", took, budget)
	}
	if !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("refusal %q does not name the server", err)
	}
	t.Logf("new claim refused in %s: %v", took.Round(time.Millisecond), err)

	start = time.Now()
	m.Release("ctr-0")
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Release of the dead mount took %s", d)
	}
	for len(mountsAt(t, path)) > 0 {
		if time.Since(start) > 4*unmountTimeout {
			t.Fatalf("the dead mount is still mounted %s after its release", time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the dead mount was gone from mountinfo %s after its release (grace 200ms, umount bounded by %s, then umount -f, then umount -l); threads in D state then: %d; totals %+v",
		time.Since(start).Round(time.Millisecond), unmountTimeout, dStateTasks(t), m.Totals())
	if tot := m.Totals(); tot.ForcedUnmounts+tot.LazyUnmounts == 0 {
		t.Errorf("the release of the dead mount was not escalated: totals %+v", tot)
	}

	// The prober on: many probe intervals, each probing every held mount and each heal
	// attempt probing its mount: the test's threads in D state are the Manager's, and stay at
	// the bound.
	const bound = 1 // one server
	dReleased := dStateTasks(t)
	cfg := m.config()
	cfg.ProbeInterval = probeInterval
	m.Reconfigure(cfg)
	time.Sleep(ProbeTimeout + 10*probeInterval)
	var dState, stuck int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		dState, stuck = dStateTasks(t), stuckTotal(m)
		if dState == stuck || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("dead server: %d mounts of it held, probed every %s; %s after nfsd stopped: threads of the test process in D state %d (before: %d, after the release: %d), stuck calls %v (bound %d per server); deaths %d",
		len(paths)-1, probeInterval, time.Since(stoppedAt).Round(time.Millisecond), dState, before, dReleased, m.Totals().StuckCalls, bound, m.Totals().Deaths)
	if stuck != bound || dState != stuck {
		t.Errorf("%d threads in D state, %d stuck calls counted (%v); want both %d", dState, stuck, m.Totals().StuckCalls, bound)
	}
	for _, st := range m.Status() {
		if st.Key != b.Key() && st.Key != held[0].Key() && st.State == "mounted" {
			t.Errorf("mount %s of the dead server is %s: want it found dead (its probe refused: the server's is stuck)", st.Spec, st.State)
		}
	}

	// A dead mount released while it is being healed: unmounted while the server is still
	// down (the heal attempt under way stopped), not healed on.
	last := len(paths) - 1
	start = time.Now()
	m.Release(fmt.Sprint("ctr-", last))
	for len(mountsAt(t, paths[last])) > 0 {
		if time.Since(start) > MaxHealBackoff+4*unmountTimeout {
			t.Fatalf("the dead mount released while healed is still mounted %s after its release: %+v", time.Since(start).Round(time.Millisecond), m.Status())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("a dead mount released while healed was gone from mountinfo %s after its release, the server still down", time.Since(start).Round(time.Millisecond))

	// The server back: the held mounts answer, the stuck call returns, a new claim mounts.
	nfsd("8")
	stopped = false
	back := time.Now()
	var reads, unstuck time.Duration
	for deadline := back.Add(60 * time.Second); reads == 0 || unstuck == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("60s after nfsd started again: held mount answers after %s, stuck calls %v; status %+v", reads, m.Totals().StuckCalls, m.Status())
		}
		if reads == 0 {
			if err := <-statChild(t, filepath.Join(paths[1], "hello"), 2*time.Second); err == nil {
				reads = time.Since(back)
			}
		}
		if unstuck == 0 && stuckTotal(m) == 0 {
			unstuck = time.Since(back)
		}
	}
	if _, err := acquireEventually(t, m, 60*time.Second, b, "ctr-b"); err != nil {
		t.Fatalf("a claim of a new mount of the server once it is back: %v", err)
	}
	claimed := time.Since(back)
	healed := time.Duration(0)
	for deadline := back.Add(30 * time.Second); healed == 0; time.Sleep(100 * time.Millisecond) {
		n := 0
		for _, st := range m.Status() {
			if st.State == "mounted" {
				n++
			}
		}
		if n == len(paths)-1 { // paths[0] and paths[last] released, b claimed
			healed = time.Since(back)
		} else if time.Now().After(deadline) {
			t.Fatalf("not every mount mounted again 30s after nfsd started: %+v", m.Status())
		}
	}
	t.Logf("recovery after nfsd started again: held mount answers a stat after %s, stuck calls 0 after %s, a new claim of the server mounted after %s, every held mount mounted after %s; threads in D state %d; totals %+v",
		reads.Round(time.Millisecond), unstuck.Round(time.Millisecond), claimed.Round(time.Millisecond), healed.Round(time.Millisecond), dStateTasks(t), m.Totals())

	// Dead again: the agent stops (SIGTERM: Close) in time though a thread is stuck.
	nfsd("0")
	stopped = true
	for deadline := time.Now().Add(10 * time.Second); stuckTotal(m) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no probe stuck 10s after nfsd stopped again: %+v", m.Status())
		}
	}
	start = time.Now()
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	const closeBound = 5 * time.Second
	select {
	case <-closed:
	case <-time.After(closeBound):
		t.Fatalf("Close did not return within %s with %d threads in D state", closeBound, dStateTasks(t))
	}
	t.Logf("Close returned in %s with %d threads in D state (stuck calls %v)", time.Since(start).Round(time.Millisecond), dStateTasks(t), m.Totals().StuckCalls)
}
