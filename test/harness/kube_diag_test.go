package harness

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestTeardownDiagnosis: what a failed pod teardown reports: the leaves below the pods
// directory (files and empty directories, not the directories above them), bounded, and the
// kubelet log lines that explain it.
func TestTeardownDiagnosis(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"pod-a/volumes/empty", "pod-b/volumes/x"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"pod-b/volumes/x/file", "pod-c"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := leafPaths(dir, 10), "pod-a/volumes/empty\npod-b/volumes/x/file\npod-c"; got != want {
		t.Errorf("leafPaths = %q, want %q", got, want)
	}
	if got, want := leafPaths(dir, 1), "pod-a/volumes/empty\nand 2 more"; got != want {
		t.Errorf("leafPaths(max 1) = %q, want %q", got, want)
	}
	log := filepath.Join(dir, "kubelet.log")
	os.WriteFile(log, []byte("a orphaned 1\nb\nc orphaned 2\nd orphaned 3\n"), 0o644)
	if got, want := tailMatching(log, "rphaned", 2), log+", last lines with \"rphaned\":\nc orphaned 2\nd orphaned 3"; got != want {
		t.Errorf("tailMatching = %q, want %q", got, want)
	}
	if got, want := tail(log, 2), log+":\nc orphaned 2\nd orphaned 3"; got != want {
		t.Errorf("tail = %q, want %q", got, want)
	}
	if got, want := mountList(dir), "(none)"; got != want {
		t.Errorf("mountList without mounts = %q, want %q", got, want)
	}

	// A mount point is a marked leaf, not walked into (a hung network volume would block the
	// walk), and the mounts are listed apart.
	t.Run("mount points", func(t *testing.T) {
		testenv.Require(t, "root")
		dir := t.TempDir()
		vol := filepath.Join(dir, "pod-d/volumes/vol")
		if err := MountTmpfs(vol, "private"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unmountAll(dir) })
		if err := os.WriteFile(filepath.Join(vol, "inside"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pod-e"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if got, want := leafPaths(dir, 10), "pod-d/volumes/vol (mount point)\npod-e"; got != want {
			t.Errorf("leafPaths = %q, want %q", got, want)
		}
		if got, want := mountList(dir), "pod-d/volumes/vol (tmpfs)"; got != want {
			t.Errorf("mountList = %q, want %q", got, want)
		}
	})
}
