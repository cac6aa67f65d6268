package netmount

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// moveMountBeneath is MOVE_MOUNT_BENEATH (Linux >= 6.5), not in x/sys/unix yet.
const moveMountBeneath = 0x200

// replaceDead puts the filesystem mounted at staging in the place of the dead mount at
// target, so that every container holding a slave (rslave) or peer (rshared) copy of the dead
// mount sees the new one at the same destination, and target holds one mount afterwards.
//
// Why it works: a container's class mount is a bind of the mount that was topmost at target
// when the container was created, and a slave (or peer) of its peer group. A mount made on top
// of a shared mount propagates to its peers and slaves; a mount made beneath (move_mount
// MOVE_MOUNT_BENEATH) or beside it does not reach them, since their parents are the
// containers' own. So the new filesystem must go on top of the dead one, and the host's stack
// is then compacted without any unmount propagating into the containers:
//
//  1. dead: an O_PATH descriptor of the dead mount (the topmost at target);
//  2. the new mount F at staging (on a private mount) is made shared, and cloned (open_tree):
//     the clone C is a peer of F;
//  3. C goes beneath the dead mount (MOVE_MOUNT_BENEATH): target's stack is C, dead;
//  4. F is moved on top of the dead mount: it propagates to the dead mount's slaves and peers,
//     the containers' copies, as slaves (peers) of F's group, which C is in;
//  5. the dead mount is made private through its descriptor: unmounting what lies on it no
//     longer propagates (an unmount of F would otherwise unmount the containers' copies);
//  6. F, then the dead mount, are detached: target's stack is C alone, and the containers'
//     copies are slaves of C's group, ready for the next replacement.
//
// Without MOVE_MOUNT_BENEATH (Linux < 6.5) C is attached after both are detached: target is
// without a mount for a few microseconds.
//
// A container that lived through the death keeps the dead mount beneath its new one (nothing
// outside its mount namespace can remove it); it goes with the container.
func replaceDead(target, staging string) error {
	dead, err := unix.Open(target, unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("open the dead mount %s: %w", target, err)
	}
	defer unix.Close(dead)
	if err := unix.Mount("", staging, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", staging, err)
	}
	clone, err := unix.OpenTree(unix.AT_FDCWD, staging, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("clone the new mount at %s: %w", staging, err)
	}
	defer unix.Close(clone)
	beneath := true
	if err := unix.MoveMount(clone, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH|moveMountBeneath); err != nil {
		if !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("mount the new filesystem beneath the dead one at %s: %w", target, err)
		}
		beneath = false // Linux < 6.5
	}
	if err := unix.MoveMount(unix.AT_FDCWD, staging, unix.AT_FDCWD, target, 0); err != nil {
		err = fmt.Errorf("move the new mount from %s onto the dead one at %s: %w", staging, target, err)
		if beneath {
			// target is C, dead: detach the dead one, C stays (only new containers get it).
			if uerr := detachDead(dead, target); uerr != nil {
				err = fmt.Errorf("%w; and detaching the dead mount: %v", err, uerr)
			}
		}
		return err
	}
	// target is C, dead, F (or dead, F without beneath).
	if err := detachDead(dead, target); err != nil {
		return err
	}
	if !beneath {
		if err := unix.MoveMount(clone, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach the new mount at %s: %w", target, err)
		}
	}
	return nil
}

// detachDead makes the dead mount (the descriptor) private and detaches what lies on it at
// target, then the dead mount itself.
func detachDead(dead int, target string) error {
	if err := unix.MountSetattr(dead, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Propagation: unix.MS_PRIVATE}); err != nil {
		return fmt.Errorf("make the dead mount at %s private: %w", target, err)
	}
	for {
		// Detach the topmost mount at target until the dead one is gone.
		top, err := unix.Open(target, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", target, err)
		}
		same, err := sameMount(top, dead)
		unix.Close(top)
		if err != nil {
			return err
		}
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("detach the mount at %s: %w", target, err)
		}
		if same {
			return nil
		}
	}
}

// sameMount says whether two descriptors are on the same mount (their mount IDs).
func sameMount(a, b int) (bool, error) {
	ia, err := mountID(a)
	if err != nil {
		return false, err
	}
	ib, err := mountID(b)
	if err != nil {
		return false, err
	}
	return ia == ib, nil
}

// mountID reads the mount ID of fd from /proc/self/fdinfo, which asks nothing of the
// filesystem (a statx of a dead FUSE mount may).
func mountID(fd int) (uint64, error) {
	data, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no mnt_id in /proc/self/fdinfo/%d", fd)
}

// makePrivateDir makes dir a private mount of its own (a bind onto itself unless it is a
// mount point), so that what is mounted below it stays there and can be moved away.
func makePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	var parentID uint64
	if pfd, err := unix.Open(dir+"/..", unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
		parentID, _ = mountID(pfd)
		unix.Close(pfd)
	}
	id, err := mountID(fd)
	unix.Close(fd)
	if err != nil {
		return err
	}
	if id == parentID {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	return nil
}
