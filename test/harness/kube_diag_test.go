package harness

import (
	"os"
	"path/filepath"
	"testing"
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
}
