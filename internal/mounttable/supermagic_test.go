package mounttable

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSuperMagicAgreesWithStatfs: the type read from the mount table (statmount, or the type
// mountinfo names on kernels without it) is the one statfs(2) reports, for the root
// filesystem, a tmpfs, /proc and a path inside them; the mountinfo fallback agrees on every
// kernel.
func TestSuperMagicAgreesWithStatfs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", "/dev/shm", "/proc", "/proc/self", file} {
		var sfs unix.Statfs_t
		if err := unix.Statfs(p, &sfs); err != nil {
			t.Fatal(err)
		}
		id, err := MountID(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := SuperMagic(id, p)
		if err != nil || got != sfs.Type {
			t.Errorf("SuperMagic(%s) = %#x, %v; statfs says %#x", p, got, err, sfs.Type)
		}
		m, err := OfPath(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := mountinfoSuperMagic(uint64(m.MountinfoID), p); err != nil || got != sfs.Type {
			t.Errorf("from mountinfo, SuperMagic(%s) = %#x, %v; statfs says %#x", p, got, err, sfs.Type)
		}
	}
	if _, err := MountID("/no/such/path"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("MountID of a missing path: %v, want not exist", err)
	}
}
