package copies

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// The tmpfs mounts of the copies (side effects).
//
// The node's copy dir is one tmpfs (PrepareCopyDir); each pod's copies live on a tmpfs of
// their own mounted on it at Dir/<pod UID> (mountPodTmpfs), sized to the pod's budget: a copy
// removed or replaced while a process still holds it open (a descriptor passed over a unix
// socket, which no scan of /proc finds in the process that opened it) keeps its pages on the
// pod's tmpfs, so what a pod pins never passes its budget nor takes another pod's space.

// Sources of the copies' tmpfs mounts, as mountinfo shows them: node cleanup knows them by
// these names as mountkeeper's.
const (
	NodeTmpfsSource = "mountkeeper-subpath"
	PodTmpfsSource  = "mountkeeper-subpath-pod"
)

// PodInodes is the nr_inodes of a pod's tmpfs for podEntries: the charged entries, the
// container and volume directories that hold them (at most two per copy, and every copy is at
// least one entry) and the tmpfs root, so that the inodes never run out before the charge.
func PodInodes(podEntries int64) int64 { return 3*podEntries + 1 }

// tmpfsRoot says whether dir is the root of a tmpfs mount.
func tmpfsRoot(dir string) (bool, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return false, &fs.PathError{Op: "statfs", Path: dir, Err: err}
	}
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, 0, &stx); err != nil {
		return false, &fs.PathError{Op: "statx", Path: dir, Err: err}
	}
	return sfs.Type == unix.TMPFS_MAGIC && stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}

// mountTmpfs mounts a root-only tmpfs named source with options opts on dir and makes it
// shared, so that a copy bound into a container with rslave propagation passes the runtime's
// check. Exec stays allowed: a configMap may hold scripts the container runs.
func mountTmpfs(source, dir, opts string) error {
	if err := unix.Mount(source, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount a tmpfs on %s for subPath copies: %w", dir, err)
	}
	return makeShared(dir)
}

func makeShared(dir string) error {
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

func tmpfsOptions(size, inodes int64) string {
	return fmt.Sprintf("mode=0700,size=%d,nr_inodes=%d", size, inodes)
}

// mountPodTmpfs makes dir (Dir/<pod UID>) a tmpfs of size bytes and inodes inodes at most,
// unless it is one already (an earlier agent's: it keeps its size), and returns a descriptor
// of its root (O_PATH), through which its use is measured for as long as it lives, detached
// too.
func mountPodTmpfs(dir string, size, inodes int64) (*os.File, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	root, err := tmpfsRoot(dir)
	if err != nil {
		return nil, err
	}
	if !root {
		if err := mountTmpfs(PodTmpfsSource, dir, tmpfsOptions(size, inodes)); err != nil {
			return nil, err
		}
	}
	return openTmpfs(dir)
}

// openTmpfs opens the root of the tmpfs at dir (O_PATH: fstatfs works through it). A file,
// not a bare descriptor: a Copies replaced by a reload lets go of its own when collected.
func openTmpfs(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// tmpfsUse is what the tmpfs open at fd holds: its data pages in bytes (with what files
// unlinked but still open hold) and its inodes, the root among them.
func tmpfsUse(f *os.File) (Usage, error) {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return Usage{}, err
	}
	return Usage{Bytes: int64(sfs.Blocks-sfs.Bfree) * sfs.Bsize, Entries: int64(sfs.Files - sfs.Ffree)}, nil
}

// detachPodTmpfs detaches the pod's tmpfs at dir, lazily (what a process still holds stays
// until it lets go), and removes its mount point.
func detachPodTmpfs(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("detach the pod's copy tmpfs on %s: %w", dir, err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// PrepareCopyDir makes dir a tmpfs of its own (size bytes and inodes entries at most, root
// only), or resizes the one it is already, so that copies of secrets never reach a disk and
// the node pool is bounded in bytes and in inodes (tmpfs size= does not bound inodes). It
// holds the pods' tmpfs mounts (mountPodTmpfs) and their mount points.
func PrepareCopyDir(dir string, size, inodes int64) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	root, err := tmpfsRoot(dir)
	if err != nil {
		return err
	}
	opts := tmpfsOptions(size, inodes)
	if !root {
		if err := mountTmpfs(NodeTmpfsSource, dir, opts); err != nil {
			return err
		}
	} else if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("resize the tmpfs of subPath copies on %s to %s: %w", dir, opts, err)
	} else if err := makeShared(dir); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}
