package netmount

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// serverFake is a healing fakeSystem whose probes go through a bounded group keyed by
// probeKey, as liveSystem's do, and stat a pretend server: while it is down every stat of a
// mount made at its old address hangs (a hard kernel client) until it is back there, and a
// mount attempt fails. Each mount records the address it was made at (addr= in its super
// options), and a replacement carries its new mount's to the host path.
type serverFake struct {
	*fakeSystem
	group *bounded.Group

	mu      sync.Mutex
	down    bool
	refuses bool                     // down and refusing connections too (reachServer); else it accepts them
	dials   int                      // reachServer's calls
	probed  int                      // probes made
	addr    string                   // where the server answers now
	addrs   map[string]string        // the address each mount was made at, by path
	ids     map[string]int           // the mount ID of each mount, by path
	hung    map[string]chan struct{} // paths whose own daemon hangs (FUSE) until it is killed
	daemons []chan struct{}          // every hung daemon, to end at the end
	back    chan struct{}            // closed when the server is back at its old address
}

func newServerFake() *serverFake {
	f := &serverFake{fakeSystem: newFakeSystem(), group: bounded.NewGroup(64), addr: "10.0.0.1",
		addrs: map[string]string{}, ids: map[string]int{}, hung: map[string]chan struct{}{}, back: make(chan struct{})}
	f.probes = f.group
	f.mountFn = func(ctx context.Context, target string, _ int) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.down {
			return errors.New("mount.nfs: Connection refused")
		}
		f.addrs[target] = f.addr
		f.ids[target] = len(f.ids) + 1
		return nil
	}
	f.probeFn = func(s netspec.Spec, target string) error {
		f.mu.Lock()
		f.probed++
		top := mountRef{ID: f.ids[target], SuperOptions: "rw,addr=" + f.addrs[target]}
		// A hard mount's stat waits for its server at the address the mount was made at.
		hangs := f.down || f.addrs[target] != f.addr
		back, daemon := f.back, f.hung[target]
		f.mu.Unlock()
		_, err := bounded.Do(f.group, 30*time.Millisecond, probeKey(s, target, top), "stat "+target, func() (struct{}, error) {
			if daemon != nil {
				<-daemon
				return struct{}{}, syscall.ENOTCONN
			}
			if hangs {
				<-back
			}
			return struct{}{}, nil
		})
		return err
	}
	return f
}

// end lets every call still hung on the server or on a daemon return: the test is done.
func (f *serverFake) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.back:
	default:
		close(f.back)
	}
	for _, c := range f.daemons {
		close(c)
	}
	f.daemons = nil
}

// daemon is a daemon that hangs until the test ends.
func (f *serverFake) daemon() chan struct{} {
	c := make(chan struct{})
	f.daemons = append(f.daemons, c)
	return c
}

func (f *serverFake) daemonGone(netspec.Spec, string) error { return nil }
func (f *serverFake) prepareStaging(dir string) error       { return healingFake{}.prepareStaging(dir) }
func (f *serverFake) replace(target, staging string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs[target], f.ids[target] = f.addrs[staging], f.ids[staging]
	f.hung[target] = nil // the new mount's daemon answers; the stat of the old one stays stuck
	return nil
}

func (f *serverFake) reachServer(_ context.Context, s netspec.Spec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dials++
	if f.refuses && s.ConnectAddresses() != nil {
		return errors.New("the server accepts no connection (filer:2049: connect: connection refused): no mount helper started until it does")
	}
	return nil
}

// TestStuckProbesBoundedPerServer: probes of several mounts of one dead server leave at most
// one thread stuck for a kernel client (counted in Totals), the mounts refused meanwhile are
// dead, none flaps back to mounted while the server is down, and all are back soon after it
// is; a FUSE mount whose own daemon hangs does not make another mount of its server dead; a
// server back at another address heals its mounts though the stuck probe of the old
// address never returns.
func TestStuckProbesBoundedPerServer(t *testing.T) {
	nfs := func(opts ...string) netspec.Spec {
		return netspec.Spec{Type: "nfs", Source: "filer:/export", Options: append([]string{"vers=4.2"}, opts...)}
	}
	sshfs := func(opts ...string) netspec.Spec {
		return netspec.Spec{Type: "fuse.sshfs", Source: "root@h:/srv", Options: opts}
	}
	tests := []struct {
		name       string
		specs      []netspec.Spec
		fail       func(f *serverFake, paths []string) // what dies
		wantStuck  map[string]int
		wantDeaths []int               // of each mount, in the end
		recover    func(f *serverFake) // nil: what died is left so (a FUSE mount heals at once)
	}{
		{
			name:      "NFS server down, then back",
			specs:     []netspec.Spec{nfs(), nfs("ro"), nfs("noac"), nfs("actimeo=1")},
			fail:      func(f *serverFake, _ []string) { f.down = true },
			wantStuck: map[string]int{"filer:2049": 1}, wantDeaths: []int{1, 1, 1, 1},
			recover: func(f *serverFake) { f.down = false; close(f.back) },
		},
		{
			name:      "NFS server back at another address, its old one dead for good",
			specs:     []netspec.Spec{nfs(), nfs("ro"), nfs("noac")},
			fail:      func(f *serverFake, _ []string) { f.down = true },
			wantStuck: map[string]int{"filer:2049": 1}, wantDeaths: []int{1, 1, 1},
			recover: func(f *serverFake) { f.down, f.addr = false, "10.0.0.2" },
		},
		{
			name:      "one sshfs daemon hangs, another mount of its server answers",
			specs:     []netspec.Spec{sshfs(), sshfs("ro"), sshfs("reconnect")},
			fail:      func(f *serverFake, paths []string) { f.hung[paths[0]] = f.daemon() },
			wantStuck: map[string]int{"h:22": 1}, wantDeaths: []int{1, 0, 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newServerFake()
			defer f.end()
			c := Config{StateDir: t.TempDir(), Grace: time.Hour, RetryBackoff: 10 * time.Millisecond,
				ProbeInterval: 20 * time.Millisecond, Log: quietLog(), Wanted: tc.specs}
			m, err := newManager(c, f)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			var paths []string
			for i, s := range tc.specs {
				p, err := acquireEventually(t, m, 5*time.Second, s, fmt.Sprint("ctr-", i))
				if err != nil {
					t.Fatal(err)
				}
				paths = append(paths, p)
			}
			f.mu.Lock()
			tc.fail(f, paths)
			f.mu.Unlock()

			notMounted := func() int {
				n := 0
				for _, st := range m.Status() {
					if st.State != "mounted" {
						n++
					}
				}
				return n
			}
			deaths := func() []int {
				by := map[string]int{}
				for _, st := range m.Status() {
					by[st.Key] = st.Deaths
				}
				var out []int
				for _, s := range tc.specs {
					out = append(out, by[s.Key()])
				}
				return out
			}
			if tc.recover != nil {
				eventually(t, "every mount found dead", func() bool { return notMounted() == len(paths) })
				// Many probe intervals and heal attempts: the refused probes answer "no
				// answer" every time, so no mount flaps back to mounted.
				for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
					if n := notMounted(); n != len(paths) {
						t.Fatalf("%d of %d mounts not mounted while the server is down (a flap): %+v", n, len(paths), m.Status())
					}
				}
			} else {
				eventually(t, "the hung mount replaced", func() bool { return notMounted() == 0 && m.Totals().Recoveries > 0 })
				time.Sleep(300 * time.Millisecond) // many probe intervals
			}
			if got := f.group.Stuck(); !maps.Equal(got, tc.wantStuck) {
				t.Errorf("stuck calls %v, want %v", got, tc.wantStuck)
			}
			if got := m.Totals().StuckCalls; !maps.Equal(got, tc.wantStuck) {
				t.Errorf("Totals().StuckCalls %v, want %v", got, tc.wantStuck)
			}
			if tc.recover != nil {
				f.mu.Lock()
				tc.recover(f)
				f.mu.Unlock()
				start := time.Now()
				eventually(t, "every mount recovered", func() bool { return notMounted() == 0 })
				t.Logf("%d mounts back %s after the server", len(paths), time.Since(start).Round(time.Millisecond))
			}
			if got := deaths(); !slices.Equal(got, tc.wantDeaths) {
				t.Errorf("deaths of each mount %v, want %v", got, tc.wantDeaths)
			}
			for _, p := range paths {
				if !strings.HasPrefix(p, filepath.Join(c.StateDir, "mounts")) {
					t.Errorf("host path %s", p)
				}
			}
		})
	}
}

// TestUnusedDeadMountUnmounted: a dead mount that no container uses any more is unmounted,
// while its server is still down and without waiting out its grace period or the heal attempt
// under way (a mount of the dead server that hangs), instead of being mounted again at every
// heal attempt for as long as the server stays away; a dead mount still in use goes on being
// healed, and recovers once the server is back.
func TestUnusedDeadMountUnmounted(t *testing.T) {
	f := newServerFake()
	defer f.end()
	released := netspec.Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=4.2", "ro"}}
	used := netspec.Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=4.2"}}
	m, err := newManager(Config{StateDir: t.TempDir(), Grace: time.Hour, RetryBackoff: 10 * time.Millisecond, MountTimeout: time.Hour,
		ProbeInterval: 20 * time.Millisecond, Log: quietLog(), Wanted: []netspec.Spec{released, used}}, f)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	releasedPath, err := acquireEventually(t, m, 5*time.Second, released, "ctr-released")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquireEventually(t, m, 5*time.Second, used, "ctr-used"); err != nil {
		t.Fatal(err)
	}
	m.ReleaseUnused() // the running containers' claims are known
	f.mu.Lock()
	f.down = true
	// A mount of the dead server hangs (until mountTimeout, an hour) or until it is back.
	mountBack := f.mountFn
	f.mountFn = func(ctx context.Context, target string, attempt int) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.back:
		}
		return mountBack(ctx, target, attempt)
	}
	f.mu.Unlock()
	eventually(t, "both mounts found dead", func() bool { return m.Totals().Deaths == 2 })
	m.Release("ctr-released")
	eventually(t, "the released dead mount unmounted while its server is down", func() bool {
		for _, st := range m.Status() {
			if st.Key == released.Key() {
				return false
			}
		}
		return !f.isMountedNow(releasedPath)
	})
	attempts := func() int { // of the released mount, at its host path or a heal's staging path
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		for target, calls := range f.mountCalls {
			if base := filepath.Base(target); base == released.Key() || strings.HasPrefix(base, released.Key()+".") {
				n += len(calls)
			}
		}
		return n
	}
	before := attempts()
	time.Sleep(200 * time.Millisecond) // many heal backoffs
	if after := attempts(); after != before {
		t.Errorf("the unmounted dead mount was mounted again %d times while unused", after-before)
	}
	if st := m.Status(); len(st) != 1 || st[0].Key != used.Key() || st[0].State == "mounted" {
		t.Fatalf("status %+v, want the used mount alone, not mounted while its server is down", st)
	}
	f.mu.Lock()
	f.down = false
	close(f.back)
	f.mu.Unlock()
	eventually(t, "the used mount recovered", func() bool {
		st := m.Status()
		return len(st) == 1 && st[0].State == "mounted"
	})
}
