package subpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
)

// System is the running host. It needs Linux >= 5.6 (openat2), CAP_SYS_ADMIN in the mount
// namespace it repairs, and /proc (to name and unmount a descriptor).
type System struct{}

var _ Host = System{}

// statxMask is what every statx here asks for; the kernel fills the mount ID and the
// mount-root attribute whatever is asked.
const statxMask = unix.STATX_TYPE | unix.STATX_NLINK | unix.STATX_INO | unix.STATX_MNT_ID_UNIQUE

// Stat is one statx(2), not following a final symlink nor triggering an automount.
func (System) Stat(path string) (Info, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, statxMask, &stx); err != nil {
		return Info{}, &fs.PathError{Op: "statx", Path: path, Err: err}
	}
	return infoOf(&stx), nil
}

// StatFD is what statx says about the file open at fd (name is for messages).
func StatFD(fd int, name string) (Info, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, statxMask, &stx); err != nil {
		return Info{}, &fs.PathError{Op: "statx", Path: name, Err: err}
	}
	return infoOf(&stx), nil
}

func infoOf(stx *unix.Statx_t) Info {
	i := Info{
		Mode:           uint32(stx.Mode) & unix.S_IFMT,
		Nlink:          stx.Nlink,
		Dev:            unix.Mkdev(stx.Dev_major, stx.Dev_minor),
		Ino:            stx.Ino,
		MountRootKnown: stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0,
		MountRoot:      stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0,
	}
	switch {
	case stx.Mask&unix.STATX_MNT_ID_UNIQUE != 0:
		i.MountID, i.UniqueMountID = stx.Mnt_id, true
	case stx.Mask&unix.STATX_MNT_ID != 0:
		i.MountID = stx.Mnt_id
	}
	return i
}

// Open is openat2(2). It retries on EAGAIN, which RESOLVE_BENEATH returns when a rename or
// mount raced the lookup and the kernel could not prove it safe.
func (System) Open(dir *Node, rel string, how unix.OpenHow) (*Node, error) {
	dirfd, name := unix.AT_FDCWD, rel
	if dir != nil {
		dirfd, name = dir.fd, dir.Name+"/"+rel
	}
	how.Flags |= unix.O_PATH | unix.O_CLOEXEC
	fd, err := Openat2(dirfd, rel, &how)
	if err != nil {
		return nil, &fs.PathError{Op: "openat2", Path: name, Err: err}
	}
	info, err := StatFD(fd, name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Node{Info: info, Name: name, fd: fd}, nil
}

// Names reads directory dir through a descriptor opened from it, not by path.
func (System) Names(dir *Node) ([]string, error) {
	fd, err := unix.Openat(dir.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir.Name, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir.Name)
	defer f.Close()
	return f.Readdirnames(-1)
}

// Path reads the kernel's name of the descriptor from /proc/self/fd.
func (System) Path(n *Node) (string, error) {
	p, err := os.Readlink(procFD(n.fd))
	if err != nil {
		return "", fmt.Errorf("name of %s: %w", n.Name, err)
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("name of %s: the kernel calls it %q, not a path", n.Name, p)
	}
	return p, nil
}

// Mount asks statmount(2) about the mount n lies on (Linux >= 6.8) and falls back to
// /proc/self/mountinfo.
func (System) Mount(n *Node) (Mount, error) {
	if n.UniqueMountID {
		m, err := mounttable.StatmountByID(n.MountID)
		if !errors.Is(err, mounttable.ErrNoStatmount) {
			if err != nil {
				return Mount{}, fmt.Errorf("mount of %s: %w", n.Name, err)
			}
			return m, nil
		}
	}
	m, err := mounttable.MountinfoOf(n.fd)
	if err != nil {
		return Mount{}, fmt.Errorf("mount of %s: %w", n.Name, err)
	}
	return m, nil
}

// Clone is open_tree(2) with OPEN_TREE_CLONE: a bind of exactly the object n was opened as,
// detached until Attach.
func (System) Clone(n *Node) (*Node, error) {
	fd, err := unix.OpenTree(n.fd, "", unix.OPEN_TREE_CLONE|unix.O_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return nil, &fs.PathError{Op: "open_tree", Path: n.Name, Err: err}
	}
	name := "clone of " + n.Name
	info, err := StatFD(fd, name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Node{Info: info, Name: name, fd: fd}, nil
}

// Detach unmounts the mount whose root n is, lazily, through n's /proc/self/fd magic link:
// exactly that mount, whatever the path now leads to. Lazily, because n itself still holds it.
func (System) Detach(n *Node) error {
	if !n.MountRoot {
		return fmt.Errorf("detach %s: not the root of a mount", n.Name)
	}
	if err := unix.Unmount(procFD(n.fd), unix.MNT_DETACH); err != nil {
		return &fs.PathError{Op: "umount", Path: n.Name, Err: err}
	}
	return nil
}

// moveMountBeneath is MOVE_MOUNT_BENEATH (Linux >= 6.5), not in x/sys/unix yet.
const moveMountBeneath = 0x200

// canMountBeneath says whether the kernel knows MOVE_MOUNT_BENEATH (asked once): EINVAL for
// other reasons (a mount the kernel will not put beneath this one) stays an error instead of
// a reason to fall back to detach-then-attach.
func canMountBeneath() bool { return mounttable.CanMountBeneath() == nil }

// Attach is move_mount(2) from descriptor to descriptor. The attached mount propagates as
// the clone came out of open_tree, which is what a bind with mount(2) gets: a clone of a
// shared mount is a peer of it, a clone of a slave one a slave of the same master.
func (System) Attach(tree, target *Node, beneath bool) (Mount, error) {
	flags := unix.MOVE_MOUNT_F_EMPTY_PATH | unix.MOVE_MOUNT_T_EMPTY_PATH
	how := "onto"
	if beneath {
		if !canMountBeneath() {
			return Mount{}, fmt.Errorf("move_mount %s beneath the mount on %s: %w (Linux 6.5 or newer is needed)", tree.Name, target.Name, ErrNoBeneath)
		}
		flags |= moveMountBeneath
		how = "beneath the mount on"
	}
	if err := unix.MoveMount(tree.fd, "", target.fd, "", flags); err != nil {
		return Mount{}, fmt.Errorf("move_mount %s %s %s: %w", tree.Name, how, target.Name, err)
	}
	info, err := StatFD(tree.fd, target.Name)
	if err != nil {
		return Mount{}, err
	}
	return System{}.Mount(&Node{Info: info, Name: target.Name, fd: tree.fd})
}

// MakePrivate is mount_setattr(2) (Linux >= 5.12) on the descriptor or, before it, mount(2)
// MS_PRIVATE on its magic link.
func (System) MakePrivate(tree *Node) error {
	err := unix.MountSetattr(tree.fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Propagation: unix.MS_PRIVATE})
	if errors.Is(err, unix.ENOSYS) {
		err = unix.Mount("", procFD(tree.fd), "", unix.MS_PRIVATE, "")
	}
	if err != nil {
		return fmt.Errorf("make the bind on %s private: %w", tree.Name, err)
	}
	return nil
}

// Openat2 is openat2(2); it retries on EAGAIN, which RESOLVE_BENEATH returns when a rename or
// mount raced the lookup and the kernel could not prove it safe.
func Openat2(dirfd int, rel string, how *unix.OpenHow) (int, error) {
	var fd int
	var err error
	for range 16 {
		if fd, err = unix.Openat2(dirfd, rel, how); err != unix.EAGAIN {
			break
		}
	}
	return fd, err
}

func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
