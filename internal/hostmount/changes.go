package hostmount

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
)

// changes tells, in one non-blocking syscall, whether the host may have changed since it was
// last asked in a way that matters to a source check: the mount table (poll on
// /proc/self/mountinfo reports POLLPRI once per change) or any watched directory (inotify on
// the source and each of its ancestors: an entry created, deleted or renamed, which is how a
// component turns into a symlink or disappears). It never answers from stale state: a watch
// is added before the check it vouches for, so an event during the check is still pending at
// the next question.
type changes struct {
	mu        sync.Mutex
	mountinfo int
	inotify   int
	names     map[int32]map[string]bool // watch descriptor -> the entries in it that matter
	// events is changed's read buffer, made once: in changed's frame, 64 KiB on the stack
	// of every request's new goroutine would make it grow (copy) on every request.
	events []byte
}

const dirEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_DONT_FOLLOW

func newChanges() (*changes, error) {
	mi, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		unix.Close(mi)
		return nil, err
	}
	return &changes{mountinfo: mi, inotify: in, names: map[int32]map[string]bool{}, events: make([]byte, 64<<10)}, nil
}

// changed reports whether anything changed since the last call, and forgets it.
func (c *changes) changed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	fds := []unix.PollFd{{Fd: int32(c.mountinfo), Events: unix.POLLPRI}, {Fd: int32(c.inotify), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	if err != nil {
		return true // cannot tell: assume it did
	}
	if n == 0 {
		return false
	}
	changed := fds[0].Revents != 0
	if fds[1].Revents != 0 {
		for {
			n, err := unix.Read(c.inotify, c.events)
			if err != nil || n <= 0 {
				break // EAGAIN: drained
			}
			changed = c.matters(c.events[:n]) || changed
		}
	}
	return changed
}

// matters says whether any of the inotify events in buf concerns a watched path: an entry
// that is a component of one (created, deleted, renamed), a watched directory itself deleted
// or moved, or events lost. Events about other entries of a busy ancestor (/tmp) do not. A
// watch the kernel dropped (IN_IGNORED: its directory is gone) takes its names along. Callers
// hold c.mu.
func (c *changes) matters(buf []byte) bool {
	matters := false
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameStart := off + unix.SizeofInotifyEvent
		end := nameStart + int(ev.Len)
		if end > len(buf) {
			return true
		}
		if ev.Mask&unix.IN_IGNORED != 0 {
			delete(c.names, ev.Wd)
		}
		switch {
		case ev.Mask&(unix.IN_Q_OVERFLOW|unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
			matters = true
		case !matters && c.names[ev.Wd][strings.TrimRight(string(buf[nameStart:end]), "\x00")]:
			matters = true
		}
		off = end
	}
	return matters
}

// watch watches path and every ancestor. ok is false when a change there might not be seen:
// a filesystem whose changes inotify does not report (NFS, FUSE, CIFS: changed elsewhere).
// It may hang below a dead filesystem: call it inside the bounded check.
//
// watched holds the directories watched by this caller's earlier calls (for the sources of one
// check), with their descriptors: their ancestors are watched and local, so the walk up stops
// there. The filesystem type is read from the mount table (statmount, or mountinfo before
// Linux 6.8; never statfs, which would ask the filesystem) only where the mount changes on the
// way up: a directory on its child's mount is on the child's filesystem.
func (c *changes) watch(path string, watched map[string]int32) (ok bool, err error) {
	child, childMount := "", uint64(0)
	for p := path; ; child, p = filepath.Base(p), filepath.Dir(p) {
		wd, seen := watched[p]
		if !seen {
			mount, err := mounttable.MountID(p)
			if err != nil {
				return false, err
			}
			if p == path || mount != childMount {
				magic, err := mounttable.SuperMagic(mount, p)
				if err != nil {
					return false, err
				}
				if !localFS(magic) {
					return false, nil
				}
			}
			childMount = mount
			// Added on every check, not remembered by path: a directory removed and made
			// again at the same path is a new inode, whose old watch the kernel dropped. For
			// an inode already watched the kernel hands back the same descriptor.
			w, err := unix.InotifyAddWatch(c.inotify, p, dirEvents)
			if err != nil {
				return false, fmt.Errorf("watch %s: %w", p, err)
			}
			wd = int32(w)
		}
		if child != "" {
			c.mu.Lock()
			if c.names[wd] == nil {
				c.names[wd] = map[string]bool{}
			}
			c.names[wd][child] = true
			c.mu.Unlock()
		}
		if seen {
			return true, nil
		}
		watched[p] = wd
		if p == "/" {
			return true, nil
		}
	}
}

// localFS says whether every change to a filesystem of type t is made through this kernel,
// so inotify reports it.
func localFS(t int64) bool {
	switch t {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC,
		unix.OVERLAYFS_SUPER_MAGIC, unix.RAMFS_MAGIC, unix.F2FS_SUPER_MAGIC:
		return true
	}
	return false
}
