package hostmount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Live reads the running host. Its calls can hang on a dead network filesystem; Checker
// bounds them.
type Live struct{}

var _ Inspector = Live{}

// Stat stats path, following symlinks as the runtime's bind mount will.
func (Live) Stat(path string) (fs.FileInfo, error) { return os.Stat(path) }

// MountPoints finds the mount holding each path by its mount ID, which is exact even where
// mounts are stacked on one path: with statmount(2) where the kernel has it (Linux >= 6.8),
// else from one read of mountinfo for all paths (mount IDs from statx, Linux >= 5.8).
func (Live) MountPoints(paths []string) ([]MountPoint, error) {
	mps := make([]MountPoint, len(paths))
	for i, p := range paths {
		mp, err := statmountOf(p)
		if errors.Is(err, errNoStatmount) {
			return mountPointsFromMountinfo(paths)
		}
		if err != nil {
			return nil, err
		}
		mps[i] = mp
	}
	return mps, nil
}

func mountPointsFromMountinfo(paths []string) ([]MountPoint, error) {
	ids := make([]int, len(paths))
	want := make(map[int]bool, len(paths))
	for i, p := range paths {
		id, err := mountID(p)
		if err != nil {
			return nil, err
		}
		ids[i] = id
		want[id] = true
	}
	infos, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) {
		return !want[i.ID], false
	})
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	byID := make(map[int]MountPoint, len(infos))
	for _, in := range infos {
		shared, slave := parseOptional(in.Optional)
		byID[in.ID] = MountPoint{ID: in.ID, Path: in.Mountpoint, Shared: shared, Slave: slave}
	}
	mps := make([]MountPoint, len(paths))
	for i, id := range ids {
		mp, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("mount %d holding %s is not in this mount namespace's mountinfo", id, paths[i])
		}
		mps[i] = mp
	}
	return mps, nil
}

func mountID(path string) (int, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, &fs.PathError{Op: "statx", Path: path, Err: err}
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return 0, fmt.Errorf("statx %s: the kernel reports no mount ID (Linux 5.8 or newer is needed)", path)
	}
	return int(stx.Mnt_id), nil
}

// Bounded runs f and waits at most d for it. A call that overruns is left to finish on its own
// goroutine (a hung stat cannot be cancelled) and its result is dropped.
func Bounded[T any](d time.Duration, what string, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		var zero T
		return zero, fmt.Errorf("%s: no answer within %s (is a network filesystem on the path dead?)", what, d)
	}
}
