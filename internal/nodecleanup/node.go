package nodecleanup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
)

// liveNode is node on the running host.
type liveNode struct {
	scoper         netmount.Scoper
	unmountTimeout time.Duration
}

var _ node = liveNode{}

func (l liveNode) releaseNetwork(ctx context.Context, stateDir string, hm netmount.HostMount) error {
	return netmount.ReleaseHostMount(ctx, stateDir, hm, l.scoper, l.unmountTimeout)
}

func (l liveNode) leftoverScopes(stateDir string) (map[string][]int, error) {
	return netmount.LeftoverScopes(stateDir, l.scoper)
}

func (liveNode) unmountCopy(c copyMount) (bool, error) { return unmountCopy(c) }

func (liveNode) unmountOwn(path string) error {
	if err := unix.Unmount(path, unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

func (liveNode) remove(stateDir string, r removal) (bool, error) { return removeBeneath(stateDir, r) }

// unmountCopy unmounts c if it is still the mount on top at its path: plainly, or lazily
// (MNT_DETACH) when something of this mount namespace still holds it (EBUSY: an open file, a
// working directory; another namespace's hold was looked for before); lazy says so. Its
// memory is freed once the last holder lets go.
func unmountCopy(c copyMount) (lazy bool, err error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, c.Path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_MNT_ID, &stx); err != nil {
		return false, fmt.Errorf("unmount %s: %w", c.describe(), err)
	}
	if stx.Mask&unix.STATX_MNT_ID != 0 && int(stx.Mnt_id) != c.ID {
		return false, fmt.Errorf("unmount %s: the mount on top there is %d, not %d as listed: the mounts changed meanwhile", c.describe(), stx.Mnt_id, c.ID)
	}
	err = unix.Unmount(c.Path, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		lazy, err = true, unix.Unmount(c.Path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	}
	if err != nil {
		return lazy, fmt.Errorf("unmount %s: %w", c.describe(), err)
	}
	return lazy, nil
}

// removeBeneath removes rel below root, a file or an empty directory, resolving its parent
// below root with no symbolic link followed. A directory that is not empty stays: notEmpty
// says so. One already gone is no error.
func removeBeneath(root string, r removal) (notEmpty bool, err error) {
	path := filepath.Join(root, r.Rel)
	parent, name := filepath.Dir(path), filepath.Base(path)
	rel, err := filepath.Rel(root, parent)
	if err != nil {
		return false, err
	}
	var base int
	if rel == ".." { // the state directory itself, from its parent
		base, err = unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		base, err = unix.Openat2(unix.AT_FDCWD, root, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC})
		if err == nil && rel != "." {
			var fd int
			fd, err = unix.Openat2(base, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
			unix.Close(base)
			base = fd
		}
	}
	if err != nil {
		return false, &fs.PathError{Op: "open", Path: parent, Err: err}
	}
	defer unix.Close(base)
	flags := 0
	if r.Dir {
		flags = unix.AT_REMOVEDIR
	}
	err = unix.Unlinkat(base, name, flags)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return false, nil
	case r.Dir && (errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)):
		return true, nil
	}
	return false, fmt.Errorf("remove %s: %w", path, err)
}
