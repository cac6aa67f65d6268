package subpath

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
)

// Host performs the side effects of a repair. Apart from Stat (Stale's one call) and the Open
// of the kubelet root dir, every call works on file descriptors: no path string is resolved
// twice, so nothing can be swapped in between a check and its use. System is the real
// implementation.
type Host interface {
	// Stat statx()es path without following a final symlink: one syscall, whatever the number
	// of mounts on the node. Stale makes no other call.
	Stat(path string) (Info, error)
	// Open opens rel with openat2(2) relative to dir (an absolute path when dir is nil), with
	// how.Flags|O_PATH|O_CLOEXEC and how.Resolve.
	Open(dir *Node, rel string, how unix.OpenHow) (*Node, error)
	// Names lists the entries of directory dir.
	Names(dir *Node) ([]string, error)
	// Path is n's absolute path as the kernel names it now.
	Path(n *Node) (string, error)
	// Mount describes the mount n lies on.
	Mount(n *Node) (Mount, error)
	// Clone makes a detached bind mount of n (open_tree OPEN_TREE_CLONE), not yet attached
	// anywhere; closing it without Attach drops it.
	Clone(n *Node) (*Node, error)
	// Detach lazily unmounts the mount whose root n is (umount2 MNT_DETACH).
	Detach(n *Node) error
	// Attach moves the detached mount tree onto target (move_mount) and returns the attached
	// mount. With beneath, target is the root of a mount and tree goes beneath it
	// (MOVE_MOUNT_BENEATH), to show once the top one is detached; an error wrapping
	// ErrNoBeneath says the kernel cannot do that here.
	Attach(tree, target *Node, beneath bool) (Mount, error)
	// MakePrivate makes the attached mount tree private: it leaves its peer group and master.
	MakePrivate(tree *Node) error
}

// ErrNoBeneath says a mount cannot be attached beneath another here: the kernel is older than
// 6.5 (it does not know MOVE_MOUNT_BENEATH). Repair then detaches the stale bind first.
var ErrNoBeneath = errors.New("cannot mount beneath the existing mount")

// Info is what statx says about a file.
type Info struct {
	Mode  uint32 // file type bits (S_IFMT) only
	Nlink uint32
	Dev   uint64 // the device of the inode (unix.Mkdev)
	Ino   uint64
	// MountID identifies the mount the file lies on: the 64-bit unique ID where the kernel has
	// it (Linux >= 6.8, UniqueMountID), else the reusable one of mountinfo.
	MountID       uint64
	UniqueMountID bool
	// MountRoot says the file is the root of its mount; MountRootKnown that the kernel told
	// (STATX_ATTR_MOUNT_ROOT, Linux >= 5.8).
	MountRoot, MountRootKnown bool
}

// IsDir says whether the file is a directory.
func (i Info) IsDir() bool { return i.Mode == unix.S_IFDIR }

// Node is an open O_PATH file descriptor (or a detached mount from Clone) and what statx said
// about it when it was opened.
type Node struct {
	Info
	// Name is the path it was opened as, for messages.
	Name string
	fd   int
}

// FD is the descriptor, for the calls on it that Host does not make (package copies reads and
// copies below it, package liveupdate sets a layer's mount attributes).
func (n *Node) FD() int { return n.fd }

// Close closes the descriptor; a nil Node or a second Close does nothing.
func (n *Node) Close() {
	if n != nil && n.fd >= 0 {
		unix.Close(n.fd)
		n.fd = -1
	}
}

// Mount describes one mount (package mounttable reads it with statmount(2) or mountinfo).
type Mount = mounttable.Mount
