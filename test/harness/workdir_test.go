package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSweepStaleWorkDirs: a WorkDir whose test process has died is removed by the next
// WorkDir; the directory of a live process, and one without an owner record, are kept.
func TestSweepStaleWorkDirs(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale, err := os.MkdirTemp("/tmp", "mk-sweep-stale-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(stale)
	os.MkdirAll(filepath.Join(stale, "src", "deep"), 0o755)
	// A record as writeOwnerFile makes it, of a process that has exited.
	if err := os.WriteFile(filepath.Join(stale, workOwnerFile), []byte(fmt.Sprintf("%d 1\n", dead.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	unowned, err := os.MkdirTemp("/tmp", "mk-sweep-unowned-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(unowned)

	live := WorkDir(t, "mk-sweep-live-")
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the WorkDir of a dead test process is still there: %v", err)
	}
	for _, dir := range []string{live, unowned} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s was swept: %v", dir, err)
		}
	}
	sweepStaleWorkDirs()
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live test's WorkDir was swept: %v", err)
	}
}
