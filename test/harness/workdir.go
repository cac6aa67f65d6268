package harness

import (
	"os"
	"testing"
)

// WorkDir is a directory of the test's own under /tmp (short: unix socket paths are limited),
// named prefix*, unmounted and removed when the test or benchmark ends, passed or not.
func WorkDir(tb testing.TB, prefix string) string {
	tb.Helper()
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
	return dir
}
