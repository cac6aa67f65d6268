package netmount

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// holdPluginLock takes the state directory's lock as a running plugin's Manager does.
func holdPluginLock(t *testing.T, dir string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
}

// The hook's one-shot path never waits for the plugin's state-directory
// lock, mounts only what it is asked for (not an earlier agent's stale mounts), and mounts a
// spec once however many hooks ask at once.
func TestEnsureMountedConcurrentHooksWhileThePluginRuns(t *testing.T) {
	dir := t.TempDir()
	sys := newFakeSystem()
	sys.mountFn = func(ctx context.Context, _ string, _ int) error {
		time.Sleep(50 * time.Millisecond) // long enough for the others to pile up on the key lock
		return nil
	}
	stale := netspec.Spec{Type: "nfs", Source: "srv:/stale"}
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	writeState(filepath.Join(dir, "state"), stale.Key(), state{Type: stale.Type, Source: stale.Source})
	holdPluginLock(t, dir)

	c := Config{StateDir: dir, MountTimeout: 5 * time.Second, Log: quietLog()}
	want := filepath.Join(dir, "mounts", testSpec.Key())
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			path, err := ensureMounted(ctx, c, sys, testSpec)
			if err == nil && path != want {
				t.Errorf("ensureMounted = %s, want %s", path, want)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("ensureMounted: %v", err)
		}
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("20 hooks took %s", took)
	}
	if n := sys.calls(want); n != 1 {
		t.Errorf("%d mounts for 20 hooks of one spec, want 1", n)
	}
	if n := sys.calls(filepath.Join(dir, "mounts", stale.Key())); n != 0 {
		t.Errorf("the hook mounted an earlier agent's stale mount (%d times)", n)
	}
	states, _ := readStates(filepath.Join(dir, "state"))
	if st, ok := states[testSpec.Key()]; !ok {
		t.Errorf("no state written for the hook's mount: a plugin started later would not adopt it")
	} else if st.Version != stateVersion || st.Key != testSpec.Key() {
		t.Errorf("the hook's state: version %d, key %q; want %d, %q (a later agent reads it by its version)", st.Version, st.Key, stateVersion, testSpec.Key())
	}
}

// A live mount is found at once, without taking its key's lock (someone else may hold it for
// a long mount of another spec... or of this one, finished since).
func TestEnsureMountedFindsALiveMountAtOnce(t *testing.T) {
	dir := t.TempDir()
	sys := newFakeSystem()
	want := filepath.Join(dir, "mounts", testSpec.Key())
	sys.mounted[want] = true
	holdPluginLock(t, dir)
	os.MkdirAll(filepath.Join(dir, "locks"), 0o700)
	f, err := os.OpenFile(keyLockPath(dir, testSpec.Key()), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unix.Flock(int(f.Fd()), unix.LOCK_EX)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	path, err := ensureMounted(ctx, Config{StateDir: dir, Log: quietLog()}, sys, testSpec)
	if err != nil || path != want {
		t.Errorf("ensureMounted = %q, %v; want %s", path, err, want)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("found a live mount after %s", took)
	}
	if n := sys.calls(want); n != 0 {
		t.Errorf("mounted a live mount again (%d times)", n)
	}
}

// A dead mount (its FUSE daemon died) is unmounted lazily and mounted again.
func TestEnsureMountedReplacesADeadMount(t *testing.T) {
	dir := t.TempDir()
	sys := newFakeSystem()
	want := filepath.Join(dir, "mounts", testSpec.Key())
	sys.mounted[want] = true
	sys.probeErr[want] = unix.ENOTCONN
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := ensureMounted(ctx, Config{StateDir: dir, Log: quietLog()}, sys, testSpec); err != nil {
		t.Fatal(err)
	}
	if n, u := sys.calls(want), sys.unmounts(); n != 1 || len(u) != 1 || u[0] != "-l "+want {
		t.Errorf("%d mounts, unmounts %q; want a lazy unmount and a mount", n, u)
	}
}

// After an upgrade, the hook shares the mount an earlier version made for the same config
// entry under another key (its state stands for the spec, as the plugin's start-up adopts
// it: planAdoption), instead of mounting the export a second time; a mount whose state stands
// for another spec (retired) is not given to it.
func TestEnsureMountedSharesAnEarlierVersionsMount(t *testing.T) {
	sshfs := netspec.Spec{Type: "fuse.sshfs", Source: "root@h:/x", Options: []string{"port=22"}}
	now := netspec.Spec{Type: sshfs.Type, Source: sshfs.Source, Options: netspec.WithFUSEDefaults(sshfs.Type, sshfs.Options)}
	other := netspec.Spec{Type: "fuse.sshfs", Source: "root@h:/y"}
	for _, tc := range []struct {
		name  string
		state state // of the earlier mount, at mounts/<its key>
		made  netspec.Spec
		share bool
	}{
		{"the previous release's mount of the same entry", state{Type: sshfs.Type, Source: sshfs.Source, Options: sshfs.Options}, sshfs, true},
		{"a mount of another export", newState(other, ""), other, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sys := newFakeSystem()
			earlier := filepath.Join(dir, "mounts", tc.made.Key())
			sys.mounted[earlier] = true
			os.MkdirAll(filepath.Join(dir, "state"), 0o700)
			if err := writeState(filepath.Join(dir, "state"), tc.made.Key(), tc.state); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			path, err := ensureMounted(ctx, Config{StateDir: dir, Log: quietLog()}, sys, now)
			own := filepath.Join(dir, "mounts", now.Key())
			want, mounts := own, 1
			if tc.share {
				want, mounts = earlier, 0
			}
			if err != nil || path != want || sys.calls(own) != mounts {
				t.Errorf("ensureMounted = %q, %v, %d mounts at its own path; want %s, %d", path, err, sys.calls(own), want, mounts)
			}
		})
	}
}
