package netmount

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The state directory, mounts/ and each mount point are root's alone: a
// local user must not reach the network filesystems, nor learn what is mounted, through them.
func TestStateDirAndMountPointsAre0700(t *testing.T) {
	for _, existing := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "mk")
		if existing {
			if err := os.MkdirAll(filepath.Join(dir, "mounts"), 0o755); err != nil {
				t.Fatal(err)
			}
			os.Chmod(dir, 0o755)
		}
		sys := newFakeSystem()
		m := newTestManager(t, sys, Config{StateDir: dir})
		path, err := acquire(t, m, 5*time.Second, testSpec, "ctr")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{dir, filepath.Join(dir, "mounts"), filepath.Join(dir, "state"), path} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if mode := fi.Mode().Perm(); mode != 0o700 {
				t.Errorf("existing=%v: %s is %#o, want 0700", existing, p, mode)
			}
		}
	}
}
