package liveupdate

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/internal/subpath/subpathtest"
)

// bigBudget lets every test copy what it makes unless it tests the budget.
var bigBudget = copies.Budget{PodBytes: 64 << 20, PodEntries: 100_000, NodeBytes: 256 << 20, NodeEntries: 200_000}

func newCopies(t *testing.T, k *subpathtest.Kubelet, b copies.Budget) *copies.Copies {
	t.Helper()
	return copies.New(subpath.NewRepairer(k.Root), copyDir(t), b)
}

// copyDir is a directory for copies; its tmpfs is unmounted when the test ends.
func copyDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "copies")
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }) // runs before TempDir's removal
	return dir
}
