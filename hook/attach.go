package hook

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/specmod"
)

// attachment is one detached mount tree, cloned and set up on the host, to attach in the
// container's mount namespace.
type attachment struct {
	m    specmod.Mount
	dir  bool     // the source is a directory
	tree *os.File // the detached tree, ready to attach; owned by the caller
}

// attachAll attaches every tree at its destination beneath rootfs, all or nothing. It runs
// inside the container's mount namespace (inMountNamespace), so rootfs is a path there.
func attachAll(rootfs string, mounts []attachment) error {
	fd, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the container's rootfs in its mount namespace: open %s: %w", rootfs, err)
	}
	root := os.NewFile(uintptr(fd), rootfs)
	defer root.Close()
	var undo undoLog
	for _, a := range mounts {
		if err := attachOne(root, a, &undo); err != nil {
			err = fmt.Errorf("mount %s: %w", a.m.String(), err)
			if uerr := undo.run(); uerr != nil {
				return fmt.Errorf("%w; undoing the mounts made before it failed too, the container's namespace may keep some: %v", err, uerr)
			}
			return err
		}
	}
	return nil
}

func attachOne(root *os.File, a attachment, undo *undoLog) error {
	tree, dest := a.tree, a.m.Destination
	dst, err := resolveDestination(root, dest, a.dir, undo)
	if err != nil {
		return err
	}
	defer dst.Close()
	if err := checkMountPoint(root, dst, dest, a.dir); err != nil {
		return err
	}
	err = unix.MoveMount(int(tree.Fd()), "", int(dst.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("attach the source tree at %s (move_mount): %w", dest, err)
	}
	undo.add(func() error {
		// The tree's descriptor now points at the attached mount's root: unmount through it,
		// so no path in the container is walked again.
		p := fmt.Sprintf("/proc/self/fd/%d", tree.Fd())
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", dest, err)
		}
		return nil
	})
	return nil
}

// checkMountPoint refuses a destination whose type does not match the source's, the rootfs
// itself, or a place in the container's /proc or /sys reached through a symlink.
func checkMountPoint(root, dst *os.File, name string, dir bool) error {
	var st, rst unix.Stat_t
	if err := unix.Fstat(int(dst.Fd()), &st); err != nil {
		return fmt.Errorf("stat destination %s: %w", name, err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	switch {
	case dir && !isDir:
		return fmt.Errorf("destination %s exists in the container and is not a directory, but the source is a directory", name)
	case !dir && isDir:
		return fmt.Errorf("destination %s is a directory in the container, but the source is a file", name)
	}
	if err := unix.Fstat(int(root.Fd()), &rst); err == nil && st.Dev == rst.Dev && st.Ino == rst.Ino {
		return fmt.Errorf("destination %s resolves to the container's root (through a symlink in the image): refusing to mount over it", name)
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(dst.Fd()), &sfs); err != nil {
		return fmt.Errorf("statfs destination %s: %w", name, err)
	}
	if sfs.Type == unix.PROC_SUPER_MAGIC || sfs.Type == unix.SYSFS_MAGIC {
		return fmt.Errorf("destination %s resolves into the container's /proc or /sys (through a symlink in the image): refusing to mount there", name)
	}
	return nil
}

// undoLog records how to undo each step, to run in reverse order.
type undoLog []func() error

func (u *undoLog) add(f func() error) { *u = append(*u, f) }

// run undoes every step, newest first, and forgets them. It goes on after a failure and
// reports all of them.
func (u *undoLog) run() error {
	var errs []error
	for i := len(*u) - 1; i >= 0; i-- {
		errs = append(errs, (*u)[i]())
	}
	*u = nil
	return errors.Join(errs...)
}
