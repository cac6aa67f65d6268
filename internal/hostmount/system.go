package hostmount

import (
	"io/fs"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
)

// System reads the running host. Its calls can hang on a dead network filesystem; Checker
// bounds them.
type System struct{}

var _ Inspector = System{}

// Stat stats path through OpenSource: a symlink in any component is a *SymlinkError.
func (System) Stat(path string) (fs.FileInfo, error) {
	f, err := OpenSource(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

// MountPoints finds the mount holding each path by its mount ID, which is exact even where
// mounts are stacked on one path: with statmount(2) where the kernel has it (Linux >= 6.8),
// else from one read of mountinfo for all paths (mount IDs from statx, Linux >= 5.8).
func (System) MountPoints(paths []string) ([]MountPoint, error) {
	ms, err := mounttable.OfPaths(paths)
	if err != nil {
		return nil, err
	}
	mps := make([]MountPoint, len(ms))
	for i, m := range ms {
		mps[i] = MountPoint{ID: m.MountinfoID, Path: m.Point, Shared: m.Shared, Slave: m.Slave}
		if m.ID >= mounttable.UniqueIDOffset {
			mps[i].UniqueID = m.ID
		}
	}
	return mps, nil
}
