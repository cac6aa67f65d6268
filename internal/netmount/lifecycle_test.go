package netmount

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// After a restart every live mount is adopted, whatever the config says now; none is unmounted
// before the plugin has said which running containers use which (HoldSources, ReleaseUnused
// after Synchronize): an earlier agent's mount whose spec left the config stays while a
// container uses it and goes after the grace period once none does; a mount without a state
// file likewise; a state whose mount is gone and whose spec left the config is forgotten
// (unmounting the first at start-up would pull it from under its readers, and leaving the
// second alone would keep it forever).
func TestAdoptKeepsMountsNoLongerInTheConfigWhileUsed(t *testing.T) {
	dir := t.TempDir()
	sys := newFakeSystem()
	kept := netspec.Spec{Type: "nfs", Source: "srv:/kept"}
	removedUsed := netspec.Spec{Type: "nfs", Source: "srv:/removed-used"}
	removedIdle := netspec.Spec{Type: "nfs", Source: "srv:/removed-idle"}
	removedGone := netspec.Spec{Type: "nfs", Source: "srv:/removed-gone"}
	mounts, stateDir := filepath.Join(dir, "mounts"), filepath.Join(dir, "state")
	os.MkdirAll(stateDir, 0o700)
	for _, s := range []netspec.Spec{kept, removedUsed, removedIdle, removedGone} {
		if err := writeState(stateDir, s.Key(), newState(s, filepath.Join(mounts, s.Key()))); err != nil {
			t.Fatal(err)
		}
	}
	noState := filepath.Join(mounts, "00000000deadbeef") // an agent killed between mount and state
	for _, p := range []string{filepath.Join(mounts, kept.Key()), filepath.Join(mounts, removedUsed.Key()), filepath.Join(mounts, removedIdle.Key()), noState} {
		sys.mounted[p] = true
	}
	const grace = 30 * time.Millisecond
	m := newTestManager(t, sys, Config{StateDir: dir, Grace: grace, Wanted: []netspec.Spec{kept}})
	time.Sleep(4 * grace)
	if u := sys.unmounts(); len(u) != 0 {
		t.Fatalf("unmounted %q at start-up, before the plugin said who uses them", u)
	}
	if n := m.HoldSources("reader", []string{"/proc", filepath.Join(mounts, removedUsed.Key())}); n != 1 {
		t.Errorf("HoldSources held %d mounts, want 1", n)
	}
	m.ReleaseUnused()
	eventually(t, "the unused mounts unmounted", func() bool { return len(sys.unmounts()) == 3 })
	time.Sleep(4 * grace)
	want := []string{filepath.Join(mounts, kept.Key()), filepath.Join(mounts, removedIdle.Key()), noState}
	if u := sys.unmounts(); !slices.Equal(sorted(u), sorted(want)) {
		t.Errorf("unmounts %q, want %q (not the mount a container uses)", u, want)
	}
	if !sys.isMountedNow(filepath.Join(mounts, removedUsed.Key())) {
		t.Error("the mount a running container uses was unmounted")
	}
	if n := sys.calls(filepath.Join(mounts, removedGone.Key())); n != 0 {
		t.Errorf("%s, gone and no longer in the config, was mounted again (%d times)", removedGone, n)
	}
	if _, err := os.Stat(statePath(stateDir, removedGone.Key())); !os.IsNotExist(err) {
		t.Errorf("state of %s, gone and no longer in the config, is still there: %v", removedGone, err)
	}
	m.Release("reader")
	eventually(t, "the last mount unmounted once its container is gone", func() bool { return len(sys.unmounts()) == 4 })
	if ents, _ := os.ReadDir(stateDir); len(ents) != 0 {
		t.Errorf("state files left: %v", ents)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// A remount under way when the plugin has re-acquired the running containers' mounts
// (ReleaseUnused) starts its grace period when it finishes, if nobody uses it then.
func TestRemountUnderWayAtSynchronizeIsReleased(t *testing.T) {
	dir := t.TempDir()
	sys := newFakeSystem()
	release := sys.holdMounts()
	s := netspec.Spec{Type: "nfs", Source: "srv:/gone"}
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	writeState(filepath.Join(dir, "state"), s.Key(), state{Type: s.Type, Source: s.Source})
	const grace = 30 * time.Millisecond
	m := newTestManager(t, sys, Config{StateDir: dir, Grace: grace, Wanted: []netspec.Spec{s}})
	eventually(t, "the remount started", func() bool { return sys.calls(filepath.Join(m.mountsDir, s.Key())) == 1 })
	m.ReleaseUnused()
	close(release)
	eventually(t, "the remount nobody uses is unmounted after its grace period", func() bool { return len(sys.unmounts()) == 1 })
}

// A mount started for a pod (RunPodSandbox: Ensure) that no container ever uses goes after its
// grace period.
func TestEnsuredMountNobodyUsesIsReleased(t *testing.T) {
	sys := newFakeSystem()
	const grace = 30 * time.Millisecond
	m := newTestManager(t, sys, Config{Grace: grace})
	m.ReleaseUnused() // the plugin's start-up is over
	m.Ensure(testSpec)
	eventually(t, "the unused mount is unmounted after its grace period", func() bool { _, ok := statusOf(m, testSpec.Key()); return !ok })
	if u := sys.unmounts(); len(u) != 1 {
		t.Errorf("unmounts %q, want one", u)
	}
}
