package netmount

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// fakeSystem is a host in memory. Its hooks, when set, decide what mount and unmount do.
type fakeSystem struct {
	mu           sync.Mutex
	preflightErr error
	preflightRan func() // if set, called by every preflight before it answers
	mountFn      func(ctx context.Context, target string, attempt int) error
	unmountFn    func(ctx context.Context, target string, lazy bool) error
	probeErr     map[string]error
	// probeFn, if set, answers the probes instead of probeErr; probes, if set, is the group
	// whose stuck calls stuckCalls counts.
	probeFn      func(s netspec.Spec, target string) error
	probes       *bounded.Group
	mounted      map[string]bool
	mountCalls   map[string][]time.Time // target -> start of each attempt
	timeouts     []time.Duration        // the timeout of each attempt, in order
	unmountCalls []string               // "target" or "-l target"
	removed      []string               // scopes
	killed       []string               // scopes
	scopeUnits   []string               // scopes that exist at start
	shared       []string
}

func newFakeSystem() *fakeSystem {
	return &fakeSystem{mounted: map[string]bool{}, mountCalls: map[string][]time.Time{}, probeErr: map[string]error{}}
}

// holdMounts makes every mount attempt wait until the returned channel is closed (then it
// succeeds) or its context ends.
func (f *fakeSystem) holdMounts() chan struct{} {
	release := make(chan struct{})
	f.mountFn = func(ctx context.Context, _ string, _ int) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return release
}

func (f *fakeSystem) preflight(netspec.Spec) error {
	f.mu.Lock()
	err, ran := f.preflightErr, f.preflightRan
	f.mu.Unlock()
	if ran != nil {
		ran()
	}
	return err
}

func (f *fakeSystem) mount(ctx context.Context, s netspec.Spec, unit, target string, timeout time.Duration) error {
	f.mu.Lock()
	f.mountCalls[target] = append(f.mountCalls[target], time.Now())
	f.timeouts = append(f.timeouts, timeout)
	attempt, fn := len(f.mountCalls[target]), f.mountFn
	f.mu.Unlock()
	// A heal mounts at a staging path named key.attempt, in the scope of the key.
	if key, _, _ := strings.Cut(filepath.Base(target), "."); unit != "mount-"+key {
		return fmt.Errorf("unit %s for target %s", unit, target)
	}
	if fn != nil {
		if err := fn(ctx, target, attempt); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.mounted[target] = true
	f.mu.Unlock()
	return nil
}

func (f *fakeSystem) mountsBelow(dir string) (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for p := range f.mounted {
		if strings.HasPrefix(p, dir+"/") {
			out[p] = true
		}
	}
	return out, nil
}

func (f *fakeSystem) isMounted(target string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mounted[target], nil
}

func (f *fakeSystem) probe(s netspec.Spec, target string) error {
	f.mu.Lock()
	fn := f.probeFn
	err := f.probeErr[target]
	f.mu.Unlock()
	if fn != nil {
		return fn(s, target)
	}
	return err
}

func (f *fakeSystem) stuckCalls() map[string]int {
	f.mu.Lock()
	g := f.probes
	f.mu.Unlock()
	if g == nil {
		return map[string]int{}
	}
	return g.Stuck()
}

func (f *fakeSystem) unmount(ctx context.Context, target string, lazy bool) error {
	f.mu.Lock()
	call, fn := target, f.unmountFn
	if lazy {
		call = "-l " + target
	}
	f.unmountCalls = append(f.unmountCalls, call)
	f.mu.Unlock()
	if fn != nil {
		if err := fn(ctx, target, lazy); err != nil {
			return err
		}
	}
	f.mu.Lock()
	delete(f.mounted, target)
	f.mu.Unlock()
	return nil
}

func (f *fakeSystem) removeScope(unit string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, unit)
	return nil
}

func (f *fakeSystem) scopes() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.scopeUnits), nil
}

func (f *fakeSystem) killScope(unit string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, unit)
	return nil
}

func (f *fakeSystem) makeShared(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shared = append(f.shared, dir)
	return nil
}

func (f *fakeSystem) calls(target string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mountCalls[target])
}

func (f *fakeSystem) unmounts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.unmountCalls)
}

func (f *fakeSystem) isMountedNow(target string) bool {
	ok, _ := f.isMounted(target)
	return ok
}

func quietLog() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// newTestManager returns a Manager on a fake host with short timings, closed at the end.
func newTestManager(t *testing.T, sys *fakeSystem, c Config) *Manager {
	t.Helper()
	if c.StateDir == "" {
		c.StateDir = t.TempDir()
	}
	if c.Grace == 0 {
		c.Grace = time.Hour
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 10 * time.Millisecond
	}
	c.Log = quietLog()
	m, err := newManager(c, sys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// testSpec carries a password, which the Manager hands to the helper in a credentials file.
var testSpec = netspec.Spec{Type: "cifs", Source: "//10.0.0.1/srv", Options: []string{"port=22", "password=hunter2"}}

// eventually polls cond for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testsupport.Eventually(t, 5*time.Second, 5*time.Millisecond, what, cond)
}

// acquire calls Acquire with a context that ends after timeout, and fails the test if
// Acquire has not returned a second after that, instead of hanging with it.
func acquire(t *testing.T, m *Manager, timeout time.Duration, s netspec.Spec, user string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	limit := timeout + time.Second
	type result struct {
		path string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		p, err := m.Acquire(ctx, s, user)
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		return r.path, r.err
	case <-time.After(limit):
		t.Fatalf("Acquire(%s) has not returned after %s", s, limit)
		return "", nil
	}
}

// acquireEventually retries Acquire, as the kubelet retries a refused container, until it
// succeeds or timeout has passed: Acquire itself waits only for a first attempt.
func acquireEventually(t *testing.T, m *Manager, timeout time.Duration, s netspec.Spec, user string) (string, error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, err := acquire(t, m, time.Second, s, user)
		if err == nil || time.Now().After(deadline) {
			return p, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mountStatus is what a test checks of one mount the Manager knows.
type mountStatus struct {
	Key      string
	HostPath string
	Users    []string // sorted
	Mounted  bool
	State    string // idle, mounting, checking, mounted, unmounting
	Attempt  int    // mount attempts since the last start of mounting
	// LastError is the last mount or unmount error; "" after a success.
	LastError string
}

// statuses returns the state of every mount m knows, sorted by key.
func statuses(m *Manager) []mountStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]mountStatus, 0, len(m.entries))
	for _, e := range m.entries {
		st := mountStatus{Key: e.key, HostPath: e.hostPath, Mounted: e.phase == mounted, State: e.phase.String(), Attempt: e.attempt}
		for u := range e.users {
			st.Users = append(st.Users, u)
		}
		sort.Strings(st.Users)
		if e.lastErr != nil {
			st.LastError = e.lastErr.Error()
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func statusOf(m *Manager, key string) (mountStatus, bool) {
	for _, st := range statuses(m) {
		if st.Key == key {
			return st, true
		}
	}
	return mountStatus{}, false
}

func TestAcquireMountsOnceForAllUsers(t *testing.T) {
	sys := newFakeSystem()
	dir := t.TempDir()
	m := newTestManager(t, sys, Config{StateDir: dir})
	wantPath := filepath.Join(dir, "mounts", testSpec.Key())

	for _, user := range []string{"ctr-a", "ctr-b", "ctr-a"} {
		path, err := acquire(t, m, 5*time.Second, testSpec, user)
		if err != nil {
			t.Fatalf("Acquire for %s: %v", user, err)
		}
		if path != wantPath {
			t.Errorf("Acquire for %s = %s, want %s", user, path, wantPath)
		}
	}
	if n := sys.calls(wantPath); n != 1 {
		t.Errorf("%d mounts for one spec and two users, want 1", n)
	}
	st, ok := statusOf(m, testSpec.Key())
	if !ok || !st.Mounted || st.State != "mounted" || !slices.Equal(st.Users, []string{"ctr-a", "ctr-b"}) || st.HostPath != wantPath {
		t.Errorf("mounts = %+v, want one mounted entry with users ctr-a, ctr-b", statuses(m))
	}
	if !slices.Equal(sys.shared, []string{filepath.Join(dir, "mounts")}) {
		t.Errorf("made shared: %q, want the mounts directory", sys.shared)
	}

	// State: 0600 in a 0700 directory, with the spec redacted.
	stateFile := filepath.Join(dir, "state", testSpec.Key()+".json")
	fi, err := os.Stat(stateFile)
	if err != nil {
		t.Fatalf("state file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600 (options may hold secrets)", fi.Mode().Perm())
	}
	if di, err := os.Stat(filepath.Join(dir, "state")); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("state directory mode %v (%v), want 0700", di.Mode().Perm(), err)
	}
	states, errs := readStates(filepath.Join(dir, "state"))
	got := states[testSpec.Key()]
	if len(errs) > 0 || got.spec().String() != testSpec.String() || got.HostPath != wantPath || got.MountedAt.IsZero() {
		t.Errorf("state = %+v (%v), want the redacted spec, host path and mount time", got, errs)
	}
}

func TestAcquireWaitsAtMostUntilItsDeadline(t *testing.T) {
	sys := newFakeSystem()
	release := sys.holdMounts()
	m := newTestManager(t, sys, Config{})

	start := time.Now()
	_, err := acquire(t, m, 100*time.Millisecond, testSpec, "ctr-a")
	took := time.Since(start)
	want := testSpec.String() + ": not ready: still mounting (attempt 1, started "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Acquire while mounting\ngot:  %v\nwant: %s...", err, want)
	}
	// Lower bound only: the mount is held until release, so an Acquire that ignored its
	// deadline would never return, and acquire fails the test a second after the deadline.
	if took < 100*time.Millisecond {
		t.Errorf("Acquire with a 100ms deadline returned after %s, before it", took)
	}

	close(release) // the mount went on in the background: the retry finds it
	if _, err := acquire(t, m, 5*time.Second, testSpec, "ctr-a"); err != nil {
		t.Fatalf("Acquire after the mount finished: %v", err)
	}
	if n := sys.calls(filepath.Join(m.mountsDir, testSpec.Key())); n != 1 {
		t.Errorf("%d mount attempts, want 1", n)
	}
}

func TestAcquireReportsTheLastErrorWhileRetrying(t *testing.T) {
	sys := newFakeSystem()
	sys.mountFn = func(_ context.Context, _ string, attempt int) error {
		if attempt < 4 {
			return fmt.Errorf("read: Connection reset by peer (try %d)", attempt)
		}
		return nil
	}
	m := newTestManager(t, sys, Config{RetryBackoff: 40 * time.Millisecond})
	target := filepath.Join(m.mountsDir, testSpec.Key())

	eventually(t, "the first attempt failed", func() bool {
		m.Ensure(testSpec)
		st, _ := statusOf(m, testSpec.Key())
		return st.LastError != ""
	})
	_, err := acquire(t, m, 10*time.Millisecond, testSpec, "ctr-a")
	want := testSpec.String() + ": not ready: last error: read: Connection reset by peer (try 1) (attempt 1; next attempt in "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Acquire after a failed attempt\ngot:  %v\nwant: %s...", err, want)
	}

	if _, err := acquireEventually(t, m, 5*time.Second, testSpec, "ctr-a"); err != nil {
		t.Fatalf("Acquire once the retries succeed: %v", err)
	}
	sys.mu.Lock()
	starts := slices.Clone(sys.mountCalls[target])
	sys.mu.Unlock()
	if len(starts) != 4 {
		t.Fatalf("%d attempts, want 4", len(starts))
	}
	if unit := "mount-" + testSpec.Key(); !slices.Equal(sys.killed, []string{unit, unit, unit}) {
		t.Errorf("scopes killed after the failed attempts: %q, want %s three times", sys.killed, unit)
	}
	for i, minGap := range []time.Duration{40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond} {
		if gap := starts[i+1].Sub(starts[i]); gap < minGap {
			t.Errorf("attempt %d came %s after attempt %d, want the backoff to double to %s", i+2, gap, i+1, minGap)
		}
	}
}

func TestAcquireFailsAtOnceWhenThePreflightFails(t *testing.T) {
	sys := newFakeSystem()
	sys.preflightErr = &PreflightError{Problems: []string{"mount.nfs (the helper \"mount -t nfs\" runs) not found: install nfs-common (Debian/Ubuntu) or nfs-utils (RHEL/Fedora)"}}
	m := newTestManager(t, sys, Config{RetryBackoff: time.Hour})
	nfs := netspec.Spec{Type: "nfs", Source: "server:/export"}

	start := time.Now()
	_, err := acquire(t, m, 10*time.Second, nfs, "ctr-a")
	if took := time.Since(start); took > 5*time.Second { // far below the 10s deadline, even under load
		t.Errorf("Acquire waited %s for a node that lacks the helper", took)
	}
	want := "nfs server:/export: not ready: last error: mount.nfs (the helper \"mount -t nfs\" runs) not found: install nfs-common (Debian/Ubuntu) or nfs-utils (RHEL/Fedora) (attempt 1; next attempt in "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Acquire\ngot:  %v\nwant: %s...", err, want)
	}
	var pe *PreflightError
	if !errors.As(err, &pe) {
		t.Errorf("Acquire's error %v does not wrap the *PreflightError", err)
	}
	if n := sys.calls(filepath.Join(m.mountsDir, nfs.Key())); n != 0 {
		t.Errorf("%d mounts despite the failed preflight, want 0", n)
	}
}

// TestAcquireMountsOnceTheHelperIsInstalled: the helper installed after a failed preflight, the
// next claim starts the mount at once, though the next attempt was an hour away, and waits for
// it as for a first attempt; a claim that gives up meanwhile is told the mount is under way,
// not that the helper is missing; the next gets the mount.
func TestAcquireMountsOnceTheHelperIsInstalled(t *testing.T) {
	m, sys, nfs := withoutHelper(t, 50*time.Millisecond)
	release := sys.holdMounts() // the mount takes longer than FirstWait
	sys.mu.Lock()
	sys.preflightErr = nil
	sys.mu.Unlock()
	_, err := acquire(t, m, 10*time.Second, nfs, "ctr-a")
	if err == nil || !strings.Contains(err.Error(), "still mounting (attempt 2,") || strings.Contains(err.Error(), "nfs-common") {
		t.Fatalf("Acquire once the helper is installed, its mount slower than FirstWait = %v, want attempt 2 still mounting", err)
	}
	close(release)
	var path string
	eventually(t, "the mount begun once the helper was installed", func() bool {
		path, err = acquire(t, m, 10*time.Second, nfs, "ctr-a")
		return err == nil
	})
	if want := filepath.Join(m.mountsDir, nfs.Key()); path != want {
		t.Errorf("Acquire = %s, want %s", path, want)
	}
	if st := statuses(m); len(st) != 1 || st[0].Attempt != 2 || !st[0].Mounted {
		t.Errorf("status %+v, want mounted at attempt 2", st)
	}
}

// TestAcquireWaitsForTheMountItBeganOnceTheHelperIsInstalled: the claim that starts the mount
// once the helper is installed gets it, when it is mounted within FirstWait.
func TestAcquireWaitsForTheMountItBeganOnceTheHelperIsInstalled(t *testing.T) {
	m, sys, nfs := withoutHelper(t, time.Minute)
	release := sys.holdMounts()
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	sys.mu.Lock()
	sys.preflightErr = nil
	sys.mu.Unlock()
	if _, err := acquire(t, m, 30*time.Second, nfs, "ctr-a"); err != nil {
		t.Fatalf("Acquire once the helper is installed, its mount done in 100ms: %v", err)
	}
}

// TestAcquireWaitsForTheAttemptUnderWayOnceTheHelperIsInstalled: the helper installed just as
// the backoff ended, the attempt under way will mount: the claim waits for it (FirstWait), and
// is not refused with the helper's old error.
func TestAcquireWaitsForTheAttemptUnderWayOnceTheHelperIsInstalled(t *testing.T) {
	m, sys, nfs := failedWithoutHelper(t, Config{RetryBackoff: 100 * time.Millisecond, FirstWait: time.Minute})
	release := sys.holdMounts()
	sys.mu.Lock()
	sys.preflightErr = nil
	sys.mu.Unlock()
	eventually(t, "attempt 2 under way", func() bool {
		st := statuses(m)
		return len(st) == 1 && st[0].Attempt == 2
	})
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	if _, err := acquire(t, m, 30*time.Second, nfs, "ctr-a"); err != nil {
		t.Fatalf("Acquire during the attempt under way once the helper is installed, its mount done in 100ms: %v", err)
	}
}

// TestAcquireWaitsForTheAttemptThatBeganAsItCheckedTheHelper: the helper installed, a claim
// checks it again while the backoff ends and the next attempt begins: the claim waits for that
// attempt, and is not refused with the helper's old error.
func TestAcquireWaitsForTheAttemptThatBeganAsItCheckedTheHelper(t *testing.T) {
	m, sys, nfs := failedWithoutHelper(t, Config{RetryBackoff: 300 * time.Millisecond, FirstWait: time.Minute})
	release := sys.holdMounts()
	var checked atomic.Bool
	sys.mu.Lock()
	sys.preflightErr = nil
	// The claim's check of the helper, the first, returns once attempt 2 has begun.
	sys.preflightRan = func() {
		if checked.CompareAndSwap(false, true) {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if st := statuses(m); len(st) == 1 && st[0].Attempt == 2 {
					return
				}
			}
		}
	}
	sys.mu.Unlock()
	time.AfterFunc(500*time.Millisecond, func() { close(release) })
	if _, err := acquire(t, m, 30*time.Second, nfs, "ctr-a"); err != nil {
		t.Fatalf("Acquire as attempt 2 began once the helper is installed, its mount done soon after: %v", err)
	}
	if st := statuses(m); len(st) != 1 || st[0].Attempt != 2 {
		t.Errorf("status %+v, want mounted at attempt 2", st)
	}
}

// failedWithoutHelper is a Manager on c of a node without mount.nfs (its preflight fails)
// whose mount of the returned spec, claimed once, has failed.
func failedWithoutHelper(t *testing.T, c Config) (*Manager, *fakeSystem, netspec.Spec) {
	t.Helper()
	sys := newFakeSystem()
	sys.preflightErr = &PreflightError{Problems: []string{"mount.nfs (the helper \"mount -t nfs\" runs) not found: install nfs-common (Debian/Ubuntu) or nfs-utils (RHEL/Fedora)"}}
	m := newTestManager(t, sys, c)
	nfs := netspec.Spec{Type: "nfs", Source: "server:/export"}
	if _, err := acquire(t, m, 10*time.Second, nfs, "ctr-a"); err == nil {
		t.Fatal("Acquire mounted on a node without the helper")
	}
	return m, sys, nfs
}

// withoutHelper is a Manager of a node without mount.nfs (its preflight fails) whose mount of
// the returned spec has failed once: the next attempt is an hour away, and claims meanwhile
// do not end that wait.
func withoutHelper(t *testing.T, firstWait time.Duration) (*Manager, *fakeSystem, netspec.Spec) {
	t.Helper()
	m, sys, nfs := failedWithoutHelper(t, Config{RetryBackoff: time.Hour, FirstWait: firstWait})
	if _, err := acquire(t, m, 10*time.Second, nfs, "ctr-a"); err == nil || !strings.Contains(err.Error(), "(attempt 1; next attempt in ") {
		t.Fatalf("Acquire with the helper still missing = %v, want attempt 1 still waiting", err)
	}
	return m, sys, nfs
}

func TestAcquireRejectsAnInvalidSpec(t *testing.T) {
	m := newTestManager(t, newFakeSystem(), Config{})
	_, err := acquire(t, m, time.Second, netspec.Spec{Type: "nfs", Source: "server"}, "ctr-a")
	if err == nil || !strings.Contains(err.Error(), "is not of the form server:/export") {
		t.Errorf("Acquire of an invalid spec = %v", err)
	}
	if st := statuses(m); len(st) != 0 {
		t.Errorf("an invalid spec got an entry: %+v", st)
	}
}

func TestEnsureNeverBlocksAndMountsOnce(t *testing.T) {
	sys := newFakeSystem()
	release := sys.holdMounts()
	m := newTestManager(t, sys, Config{})
	// The mount hangs until release: an Ensure that waited for it would never return.
	ensured := make(chan struct{})
	go func() {
		for range 100 {
			m.Ensure(testSpec)
		}
		close(ensured)
	}()
	select {
	case <-ensured:
	case <-time.After(5 * time.Second):
		t.Fatal("100 Ensure calls have not returned after 5s while the mount hangs")
	}
	close(release)
	if _, err := acquire(t, m, 5*time.Second, testSpec, "ctr-a"); err != nil {
		t.Fatal(err)
	}
	if n := sys.calls(filepath.Join(m.mountsDir, testSpec.Key())); n != 1 {
		t.Errorf("%d mounts after 100 Ensure calls, want 1", n)
	}
}

func TestReleaseUnmountsAfterGraceOnlyWhenUnused(t *testing.T) {
	const grace = 150 * time.Millisecond
	sys := newFakeSystem()
	m := newTestManager(t, sys, Config{Grace: grace})
	target := filepath.Join(m.mountsDir, testSpec.Key())
	for _, u := range []string{"ctr-a", "ctr-b"} {
		if _, err := acquire(t, m, 5*time.Second, testSpec, u); err != nil {
			t.Fatal(err)
		}
	}

	m.Release("ctr-a")
	m.Release("ctr-unknown")
	time.Sleep(3 * grace)
	if u := sys.unmounts(); len(u) != 0 || !sys.isMountedNow(target) {
		t.Fatalf("unmounted %q while ctr-b still uses it", u)
	}

	released := time.Now()
	m.Release("ctr-b")
	eventually(t, "the mount is gone", func() bool { _, ok := statusOf(m, testSpec.Key()); return !ok })
	if took := time.Since(released); took < grace {
		t.Errorf("unmounted %s after the last release, before the %s grace period", took, grace)
	}
	if u := sys.unmounts(); !slices.Equal(u, []string{target}) {
		t.Errorf("unmounts %q, want one plain umount of %s", u, target)
	}
	if _, err := os.Stat(filepath.Join(m.stateDir, testSpec.Key()+".json")); !os.IsNotExist(err) {
		t.Errorf("state file left after the unmount: %v", err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("host directory left after the unmount: %v", err)
	}
	eventually(t, "the scope is removed", func() bool {
		sys.mu.Lock()
		defer sys.mu.Unlock()
		return slices.Contains(sys.removed, "mount-"+testSpec.Key())
	})

	// A new user mounts it again.
	if _, err := acquire(t, m, 5*time.Second, testSpec, "ctr-c"); err != nil {
		t.Fatal(err)
	}
	if n := sys.calls(target); n != 2 {
		t.Errorf("%d mounts after unmount and a new Acquire, want 2", n)
	}
}

func TestAcquireDuringGraceKeepsTheMount(t *testing.T) {
	// A grace long enough that the second Acquire (microseconds with the fake system) comes
	// inside it even on a loaded machine.
	const grace = 500 * time.Millisecond
	sys := newFakeSystem()
	m := newTestManager(t, sys, Config{Grace: grace})
	if _, err := acquire(t, m, 5*time.Second, testSpec, "ctr-a"); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	m.Release("ctr-a")
	time.Sleep(20 * time.Millisecond)
	if _, err := acquire(t, m, 5*time.Second, testSpec, "ctr-b"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(released); took >= grace {
		t.Fatalf("the second Acquire returned %s after the release, past the %s grace period: the machine is too slow for this test", took, grace)
	}
	time.Sleep(time.Until(released.Add(2 * grace))) // past the first release's grace period
	if u := sys.unmounts(); len(u) != 0 {
		t.Errorf("unmounted %q although acquired again within the grace period", u)
	}
	if n := sys.calls(filepath.Join(m.mountsDir, testSpec.Key())); n != 1 {
		t.Errorf("%d mounts, want 1", n)
	}
}

func TestUnmountGoesLazyWhenStuck(t *testing.T) {
	sys := newFakeSystem()
	sys.unmountFn = func(ctx context.Context, _ string, lazy bool) error {
		if lazy {
			return nil
		}
		<-ctx.Done() // a dead server: umount hangs
		return fmt.Errorf("umount: %w", bounded.ErrNoAnswer)
	}
	m := newTestManager(t, sys, Config{Grace: 10 * time.Millisecond, UnmountTimeout: 50 * time.Millisecond})
	target := filepath.Join(m.mountsDir, testSpec.Key())
	if _, err := acquire(t, m, 5*time.Second, testSpec, "ctr-a"); err != nil {
		t.Fatal(err)
	}
	m.Release("ctr-a")
	eventually(t, "the mount is gone", func() bool { _, ok := statusOf(m, testSpec.Key()); return !ok })
	if u := sys.unmounts(); !slices.Equal(u, []string{target, "-l " + target}) {
		t.Errorf("unmounts %q, want umount then umount -l", u)
	}
}

func TestUnmountFailureKeepsTheMountAndRetries(t *testing.T) {
	sys := newFakeSystem()
	sys.unmountFn = func(_ context.Context, _ string, _ bool) error {
		sys.mu.Lock()
		n := len(sys.unmountCalls)
		sys.mu.Unlock()
		if n == 1 {
			return errors.New("target is busy")
		}
		return nil
	}
	const grace = 50 * time.Millisecond
	m := newTestManager(t, sys, Config{Grace: grace})
	if _, err := acquire(t, m, 5*time.Second, testSpec, "ctr-a"); err != nil {
		t.Fatal(err)
	}
	m.Release("ctr-a")
	eventually(t, "the first unmount failed", func() bool { return len(sys.unmounts()) >= 1 })
	eventually(t, "the mount is gone after a retry", func() bool { _, ok := statusOf(m, testSpec.Key()); return !ok })
	if u := sys.unmounts(); len(u) != 2 {
		t.Errorf("unmounts %q, want a failed one and a retry", u)
	}
}

func TestAcquireWhileUnmountingMountsAgain(t *testing.T) {
	sys := newFakeSystem()
	unblock := make(chan struct{})
	sys.unmountFn = func(ctx context.Context, _ string, _ bool) error {
		select {
		case <-unblock:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("umount: %w", bounded.ErrNoAnswer)
		}
	}
	m := newTestManager(t, sys, Config{Grace: 10 * time.Millisecond})
	target := filepath.Join(m.mountsDir, testSpec.Key())
	if _, err := acquire(t, m, 5*time.Second, testSpec, "ctr-a"); err != nil {
		t.Fatal(err)
	}
	m.Release("ctr-a")
	eventually(t, "the unmount started", func() bool { return len(sys.unmounts()) == 1 })

	_, err := acquire(t, m, 50*time.Millisecond, testSpec, "ctr-b")
	if want := testSpec.String() + ": not ready: being unmounted after its grace period"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Acquire during the unmount\ngot:  %v\nwant: %s...", err, want)
	}
	close(unblock)
	if _, err := acquireEventually(t, m, 5*time.Second, testSpec, "ctr-b"); err != nil {
		t.Fatalf("Acquire after the unmount: %v", err)
	}
	if n := sys.calls(target); n != 2 || !sys.isMountedNow(target) {
		t.Errorf("%d mounts (mounted %v), want a second mount after the unmount", n, sys.isMountedNow(target))
	}
}

func TestNewManagerAdopts(t *testing.T) {
	dir := t.TempDir()
	sys := newFakeSystem()
	live := netspec.Spec{Type: "nfs", Source: "srv:/live"}
	gone := netspec.Spec{Type: "nfs", Source: "srv:/gone"}
	dead := netspec.Spec{Type: "fuse.sshfs", Source: "root@h:/dead"}
	mounts, stateDir := filepath.Join(dir, "mounts"), filepath.Join(dir, "state")
	os.MkdirAll(stateDir, 0o700)
	for _, s := range []netspec.Spec{live, gone, dead} {
		if err := writeState(stateDir, s.Key(), state{Type: s.Type, Source: s.Source, HostPath: filepath.Join(mounts, s.Key())}); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(stateDir, "garbage.json"), []byte("{"), 0o600)
	stranger := filepath.Join(mounts, "0000000000000000")
	sys.mounted[filepath.Join(mounts, live.Key())] = true
	sys.mounted[filepath.Join(mounts, dead.Key())] = true
	sys.mounted[stranger] = true
	sys.probeErr[filepath.Join(mounts, dead.Key())] = syscall.ENOTCONN

	m := newTestManager(t, sys, Config{StateDir: dir, Wanted: []netspec.Spec{live, gone, dead}})
	for _, s := range []netspec.Spec{live, gone, dead} {
		if _, err := acquire(t, m, 5*time.Second, s, "ctr-"+s.Source); err != nil {
			t.Errorf("Acquire %s: %v", s, err)
		}
	}
	if n := sys.calls(filepath.Join(mounts, live.Key())); n != 0 {
		t.Errorf("the live mount was mounted again (%d times)", n)
	}
	if n := sys.calls(filepath.Join(mounts, gone.Key())); n != 1 {
		t.Errorf("the mount whose state outlived it was mounted %d times, want 1", n)
	}
	if n := sys.calls(filepath.Join(mounts, dead.Key())); n != 1 {
		t.Errorf("the dead FUSE mount was mounted %d times, want 1", n)
	}
	if u := sys.unmounts(); !slices.Equal(u, []string{"-l " + filepath.Join(mounts, dead.Key())}) {
		t.Errorf("unmounts %q, want only a lazy unmount of the dead mount", u)
	}
	if !sys.isMountedNow(stranger) {
		t.Error("a mount without a state file was unmounted before the plugin said who uses it")
	}
	if st, ok := statusOf(m, "0000000000000000"); !ok || !st.Mounted {
		t.Errorf("a mount without a state file was not adopted (held until released): %+v", st)
	}
}

func TestReleaseUnusedUnmountsAdoptedMountsNobodyUses(t *testing.T) {
	dir := t.TempDir()
	sys := newFakeSystem()
	used, unused := netspec.Spec{Type: "nfs", Source: "srv:/used"}, netspec.Spec{Type: "nfs", Source: "srv:/unused"}
	for _, s := range []netspec.Spec{used, unused} {
		os.MkdirAll(filepath.Join(dir, "state"), 0o700)
		writeState(filepath.Join(dir, "state"), s.Key(), state{Type: s.Type, Source: s.Source})
		sys.mounted[filepath.Join(dir, "mounts", s.Key())] = true
	}
	const grace = 50 * time.Millisecond
	m := newTestManager(t, sys, Config{StateDir: dir, Grace: grace, Wanted: []netspec.Spec{used, unused}})
	if _, err := acquire(t, m, 5*time.Second, used, "ctr-a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both mounts adopted", func() bool {
		st, _ := statusOf(m, unused.Key())
		return st.Mounted
	})
	time.Sleep(4 * grace)
	if u := sys.unmounts(); len(u) != 0 {
		t.Fatalf("unmounted %q before ReleaseUnused: the plugin may not have re-acquired it yet", u)
	}
	m.ReleaseUnused()
	eventually(t, "the unused mount is gone", func() bool { _, ok := statusOf(m, unused.Key()); return !ok })
	time.Sleep(2 * grace)
	if u := sys.unmounts(); !slices.Equal(u, []string{filepath.Join(m.mountsDir, unused.Key())}) {
		t.Errorf("unmounts %q, want only the unused mount", u)
	}
}

func TestCloseStopsWorkAndKeepsMounts(t *testing.T) {
	sys := newFakeSystem()
	m := newTestManager(t, sys, Config{Grace: 50 * time.Millisecond, MountTimeout: time.Hour})
	if _, err := acquire(t, m, 5*time.Second, testSpec, "ctr-a"); err != nil {
		t.Fatal(err)
	}
	hanging := netspec.Spec{Type: "nfs", Source: "srv:/hangs"}
	sys.mu.Lock()
	sys.mountFn = func(ctx context.Context, _ string, _ int) error { <-ctx.Done(); return ctx.Err() }
	sys.mu.Unlock()
	m.Ensure(hanging)
	eventually(t, "the hanging mount started", func() bool { return sys.calls(filepath.Join(m.mountsDir, hanging.Key())) == 1 })
	m.Release("ctr-a")

	start := time.Now()
	m.Close()
	if took := time.Since(start); took > 5*time.Second { // the attempt's own timeout is an hour
		t.Errorf("Close took %s with a mount attempt under way", took)
	}
	time.Sleep(150 * time.Millisecond) // past the grace period
	if u := sys.unmounts(); len(u) != 0 {
		t.Errorf("unmounted %q after Close: mounts must outlive the agent", u)
	}
	if _, err := acquire(t, m, time.Second, testSpec, "ctr-b"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Acquire after Close = %v, want an error", err)
	}
}

func TestOneManagerPerStateDir(t *testing.T) {
	dir := t.TempDir()
	m1 := newTestManager(t, newFakeSystem(), Config{StateDir: dir})
	start := time.Now()
	_, err := newManager(Config{StateDir: dir, Log: quietLog(), lockWait: 200 * time.Millisecond}, newFakeSystem())
	want := fmt.Sprintf("state directory %s is in use by another mountkeeper (pid %d) after waiting 200ms", dir, os.Getpid())
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("a second Manager on one state directory\ngot:  %v\nwant: %s...", err, want)
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 5*time.Second {
		t.Errorf("gave up after %s, want 200ms (at most 5s on a loaded machine)", took)
	}

	// Once the first is closed, a new one may start, even while it waits.
	go func() { time.Sleep(100 * time.Millisecond); m1.Close() }()
	m2, err := newManager(Config{StateDir: dir, Log: quietLog(), lockWait: 5 * time.Second}, newFakeSystem())
	if err != nil {
		t.Fatalf("a Manager after the first closed: %v", err)
	}
	m2.Close()
}

// A container found running at start-up holds its mount before the adoption check ends: the
// mount must not reach its grace period under it, as it would if the plugin waited for it.
func TestHoldKeepsAMountThatIsNotReadyYet(t *testing.T) {
	sys := newFakeSystem()
	s := netspec.Spec{Type: "nfs", Source: "srv:/held"}
	const grace = 30 * time.Millisecond
	m := newTestManager(t, sys, Config{Grace: grace})
	m.Hold(s, "running-ctr")
	m.ReleaseUnused()
	eventually(t, "the held mount is mounted", func() bool { st, _ := statusOf(m, s.Key()); return st.Mounted })
	m.ReleaseUnused()
	time.Sleep(4 * grace)
	if u := sys.unmounts(); len(u) != 0 {
		t.Fatalf("unmounted %q while held by a running container", u)
	}
	m.Release("running-ctr")
	eventually(t, "the released mount is gone", func() bool { return len(sys.unmounts()) == 1 })
}

// An agent killed during a mount attempt leaves the attempt's scope; the next one removes it,
// but not the scope of a mount it adopts.
func TestNewManagerRemovesScopesLeftByAnEarlierAgent(t *testing.T) {
	dir := t.TempDir()
	sys := newFakeSystem()
	adopted := netspec.Spec{Type: "nfs", Source: "srv:/adopted"}
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	writeState(filepath.Join(dir, "state"), adopted.Key(), state{Type: adopted.Type, Source: adopted.Source})
	sys.mounted[filepath.Join(dir, "mounts", adopted.Key())] = true
	sys.scopeUnits = []string{"mount-" + adopted.Key(), "mount-0123456789abcdef", "sshd-2222"}
	newTestManager(t, sys, Config{StateDir: dir, Wanted: []netspec.Spec{adopted}})
	sys.mu.Lock()
	removed := slices.Clone(sys.removed)
	sys.mu.Unlock()
	if !slices.Equal(removed, []string{"mount-0123456789abcdef"}) {
		t.Errorf("removed scopes %q, want only the stale mount scope", removed)
	}
}

// TestStatesNameEveryPhase: States, which the metrics report by, has one name per phase.
func TestStatesNameEveryPhase(t *testing.T) {
	if len(States) != int(recovering)+1 {
		t.Fatalf("States has %d names for %d phases", len(States), int(recovering)+1)
	}
	for p := idle; p <= recovering; p++ {
		if p.String() == "" || slices.Index(States, p.String()) != int(p) {
			t.Errorf("phase %d is named %q", p, p.String())
		}
	}
}
