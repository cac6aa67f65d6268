package hostmount

import (
	"io/fs"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
)

// System reads the running host. Its calls can hang on a dead network filesystem; Checker
// bounds them.
type System struct{}

var _ Inspector = System{}

// Stat stats path through OpenSource: a symlink in any component is a *SymlinkError. The
// attributes are the kernel's cached ones (AT_STATX_DONT_SYNC): an fstat would ask a FUSE or
// NFS server for them once its attribute cache expired, and wait forever on a stopped one.
func (System) Stat(path string) (fs.FileInfo, error) {
	f, err := OpenSource(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var stx unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_SIZE|unix.STATX_MTIME, &stx); err != nil {
		return nil, &fs.PathError{Op: "statx", Path: path, Err: err}
	}
	return statxInfo{name: filepath.Base(path), stx: stx}, nil
}

// statxInfo is an fs.FileInfo from statx(2).
type statxInfo struct {
	name string
	stx  unix.Statx_t
}

func (i statxInfo) Name() string       { return i.name }
func (i statxInfo) Size() int64        { return int64(i.stx.Size) }
func (i statxInfo) ModTime() time.Time { return time.Unix(i.stx.Mtime.Sec, int64(i.stx.Mtime.Nsec)) }
func (i statxInfo) IsDir() bool        { return i.Mode().IsDir() }
func (i statxInfo) Sys() any           { return &i.stx }

func (i statxInfo) Mode() fs.FileMode {
	m := fs.FileMode(i.stx.Mode & 0o777)
	switch uint32(i.stx.Mode) & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if i.stx.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if i.stx.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if i.stx.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
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
