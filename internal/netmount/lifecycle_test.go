package netmount

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// After a restart only the mounts of the current config are adopted; an earlier agent's mount
// whose spec left the config is unmounted and forgotten, and so is its state (issue 9, item 4).
func TestAdoptForgetsMountsNoLongerInTheConfig(t *testing.T) {
	dir := t.TempDir()
	sys := newFakeSystem()
	kept := netspec.Spec{Type: "nfs", Source: "srv:/kept"}
	removedLive := netspec.Spec{Type: "nfs", Source: "srv:/removed-live"}
	removedGone := netspec.Spec{Type: "nfs", Source: "srv:/removed-gone"}
	mounts, stateDir := filepath.Join(dir, "mounts"), filepath.Join(dir, "state")
	os.MkdirAll(stateDir, 0o700)
	for _, s := range []netspec.Spec{kept, removedLive, removedGone} {
		if err := writeState(stateDir, s.Key(), state{Type: s.Type, Source: s.Source, HostPath: filepath.Join(mounts, s.Key())}); err != nil {
			t.Fatal(err)
		}
	}
	sys.mounted[filepath.Join(mounts, kept.Key())] = true
	sys.mounted[filepath.Join(mounts, removedLive.Key())] = true

	m := newTestManager(t, sys, Config{StateDir: dir, Wanted: []netspec.Spec{kept}})
	eventually(t, "the removed mounts are forgotten", func() bool {
		_, live := statusOf(m, removedLive.Key())
		_, gone := statusOf(m, removedGone.Key())
		return !live && !gone
	})
	if u := sys.unmounts(); !slices.Equal(u, []string{filepath.Join(mounts, removedLive.Key())}) {
		t.Errorf("unmounts %q, want only the live mount that left the config", u)
	}
	for _, s := range []netspec.Spec{removedLive, removedGone} {
		if n := sys.calls(filepath.Join(mounts, s.Key())); n != 0 {
			t.Errorf("%s, no longer in the config, was mounted again (%d times)", s, n)
		}
		if _, err := os.Stat(statePath(stateDir, s.Key())); !os.IsNotExist(err) {
			t.Errorf("state of %s, no longer in the config, is still there: %v", s, err)
		}
	}
	if st, ok := statusOf(m, kept.Key()); !ok {
		t.Errorf("the mount still in the config was not adopted: %+v", statuses(m))
	} else if eventually(t, "the kept mount is adopted", func() bool { st, _ = statusOf(m, kept.Key()); return st.Mounted }); sys.calls(filepath.Join(mounts, kept.Key())) != 0 {
		t.Errorf("the live mount still in the config was mounted again")
	}
}

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
