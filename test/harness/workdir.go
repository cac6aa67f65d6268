package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// workOwnerFile records, in a WorkDir, the test process that made it.
const workOwnerFile = ".mountkeeper-test-owner"

// WorkDir is a directory of the test's own under /tmp (short: unix socket paths are limited),
// named prefix*, unmounted and removed when the test or benchmark ends, passed or not. The
// directories of test processes that died before their cleanups ran (killed, or a go test
// -timeout panic) are unmounted and removed first.
func WorkDir(tb testing.TB, prefix string) string {
	tb.Helper()
	sweepStaleWorkDirs()
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := UnmountAll(dir); err != nil {
			tb.Errorf("cleanup: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			tb.Errorf("cleanup: %v", err)
		}
	})
	if err := writeOwnerFile(filepath.Join(dir, workOwnerFile)); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// sweepStaleWorkDirs removes the WorkDirs whose test process is gone. Best-effort: a failure
// here must not fail an unrelated test.
func sweepStaleWorkDirs() {
	owners, _ := filepath.Glob(filepath.Join("/tmp", "*", workOwnerFile))
	for _, owner := range owners {
		if dir := filepath.Dir(owner); !ownerFileAlive(owner) && UnmountAll(dir) == nil {
			_ = os.RemoveAll(dir)
		}
	}
}
