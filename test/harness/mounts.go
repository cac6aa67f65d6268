package harness

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// mountInfo is what the harness needs of one mount.
type mountInfo struct {
	id         int
	mountPoint string
	fsType     string
}

// readMounts reads /proc/self/mountinfo (moby/sys/mountinfo undoes the kernel's escaping).
func readMounts() ([]mountInfo, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	out := make([]mountInfo, len(infos))
	for i, in := range infos {
		out[i] = mountInfo{id: in.ID, mountPoint: in.Mountpoint, fsType: in.FSType}
	}
	return out, nil
}

// under reports whether path is dir or lies below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// mountsUnder returns the mounts at or below dir, deepest (then newest) first: the order in
// which they can be unmounted without EBUSY from a mount on top of them.
func mountsUnder(dir string) ([]mountInfo, error) {
	all, err := readMounts()
	if err != nil {
		return nil, err
	}
	var out []mountInfo
	for _, m := range all {
		if under(m.mountPoint, dir) {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		di, dj := strings.Count(out[i].mountPoint, "/"), strings.Count(out[j].mountPoint, "/")
		if di != dj {
			return di > dj
		}
		return out[i].id > out[j].id
	})
	return out, nil
}

// unmountAll unmounts everything at or below dir: container rootfs overlays, sandbox shm
// tmpfs, and whatever a test mounted there. A busy mount is detached lazily, which is enough
// for dir to be removed. It fails naming what is still mounted.
func unmountAll(dir string) error {
	var errs []error
	for range 10 { // a mount can hide another at the same point: repeat until none is left
		mounts, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range mounts {
			err := unix.Unmount(m.mountPoint, unix.UMOUNT_NOFOLLOW)
			if errors.Is(err, unix.EBUSY) {
				err = unix.Unmount(m.mountPoint, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
			}
			// EINVAL/ENOENT: already gone with a parent that was detached.
			if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m.mountPoint, err))
			}
		}
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		errs = append(errs, fmt.Errorf("still mounted: %s (%s)", m.mountPoint, m.fsType))
	}
	return errors.Join(errs...)
}
