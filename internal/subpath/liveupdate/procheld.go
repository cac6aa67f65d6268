package liveupdate

import (
	"bytes"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Which retired inodes some process still holds, found without calling into any filesystem.
//
// stat(2) of /proc/PID/fd/N (or map_files, cwd, root) follows the magic link and asks the
// file's own filesystem for its attributes: for a file on a hung sshfs or hard NFS mount
// anywhere on the node, that waits for the server, for ever. So the scan reads only text
// procfs generates from what the kernel holds in memory:
//
//   - /proc/PID/fdinfo/N: "ino:" (Linux >= 5.14) and "mnt_id:" of the descriptor's file; the
//     mount's device comes from /proc/PID/mountinfo (major:minor), which is also generated
//     text. A mount not listed there is a detached one (a retired layer is detached at
//     once) or a kernel-internal one: a descriptor there counts as held when its inode is
//     wanted, unless its magic link (readlink: the kernel's name for it, made without the
//     filesystem) is no path (a pipe, socket, anonymous inode).
//   - /proc/PID/maps: device and inode of each mapped file.
//   - cwd and root: /proc/PID/cwd is opened O_PATH, which never opens the file nor asks for
//     its attributes, and the descriptor's own fdinfo gives inode and mount. The path walk
//     still revalidates the target on the few filesystems with d_weak_revalidate (NFS, 9p):
//     so cwd and root are looked at only while a retired version has a directory, the only
//     thing a cwd or root can be. statx(AT_STATX_DONT_SYNC) is not used: FUSE honours it,
//     but 9p, and NFS's flush of dirty pages, do not, and the walk revalidates as well.
//
// A kernel without "ino:" in fdinfo (before 5.14): a descriptor on a mount of the copy tmpfs
// that mountinfo lists is stat'ed (tmpfs answers from memory; only a descriptor number reused
// between the two reads could reach another filesystem), one on a mount of another device is
// skipped, and one on a mount not listed (detached) makes every retired version count as
// held: kept and charged, never freed from under a reader.
//
// What is left that can wait (reading an epoll descriptor's fdinfo waits for its mutex, maps
// for the process's mmap lock) waits in the scanner alone, never under a request's lock
// (retired.go).

// fdInfo is what a /proc/PID/fdinfo/N file says of the descriptor's file.
type fdInfo struct {
	mntID  int
	ino    uint64
	hasIno bool // the kernel writes ino: (Linux >= 5.14)
}

// parseFdinfo reads the fields of an fdinfo file that the scan uses; ok is false when it has
// no mnt_id: line (not an fdinfo file).
func parseFdinfo(b []byte) (fi fdInfo, ok bool) {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		key, val, found := bytes.Cut(line, []byte{':'})
		if !found {
			continue
		}
		val = bytes.TrimSpace(val)
		switch string(key) {
		case "mnt_id":
			n, err := strconv.Atoi(string(val))
			if err != nil {
				return fdInfo{}, false
			}
			fi.mntID, ok = n, true
		case "ino":
			n, err := strconv.ParseUint(string(val), 10, 64)
			if err != nil {
				return fdInfo{}, false
			}
			fi.ino, fi.hasIno = n, true
		}
	}
	return fi, ok
}

// mappedInodes are the inodes of the files mapped from device dev in a /proc/PID/maps text
// ("start-end perms offset MAJOR:MINOR inode path", device in hex).
func mappedInodes(b []byte, dev uint64) []uint64 {
	var out []uint64
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		f := strings.Fields(string(line))
		if len(f) < 5 {
			continue
		}
		d, ok := parseDev(f[3], 16)
		ino, err := strconv.ParseUint(f[4], 10, 64)
		if ok && err == nil && ino != 0 && d == dev {
			out = append(out, ino)
		}
	}
	return out
}

// mountDevices maps the mount IDs of a /proc/PID/mountinfo text to their devices
// ("ID parent MAJOR:MINOR root mountpoint ...", device in decimal).
func mountDevices(b []byte, into map[int]uint64) {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		f := strings.Fields(string(line))
		if len(f) < 3 {
			continue
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		if dev, ok := parseDev(f[2], 10); ok {
			into[id] = dev
		}
	}
}

// parseDev reads a device written MAJOR:MINOR in base (maps: 16, mountinfo: 10).
func parseDev(field string, base int) (uint64, bool) {
	maj, min, ok := strings.Cut(field, ":")
	if !ok {
		return 0, false
	}
	ma, err1 := strconv.ParseUint(maj, base, 32)
	mi, err2 := strconv.ParseUint(min, base, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return unix.Mkdev(uint32(ma), uint32(mi)), true
}

// heldSet is what a scan found held.
type heldSet struct {
	inodes map[uint64]bool
	// unknown: some descriptor on the copy tmpfs, or on a detached mount, could not be told
	// by inode (a kernel without fdinfo's ino:): every retired version counts as held.
	unknown bool
}

func (h heldSet) holds(r *retiredCopy) bool {
	if h.unknown {
		return true
	}
	for ino := range r.inodes {
		if h.inodes[ino] {
			return true
		}
	}
	return false
}

// procScan is one scan of /proc (root: "/proc"; a test points it elsewhere).
type procScan struct {
	root string
	dev  uint64          // the copy tmpfs
	want map[uint64]bool // inodes of the retired versions
	dirs bool            // a retired version has a directory: cwd and root matter
	// mounts maps mount IDs to devices, from the mountinfo of each mount namespace met
	// (mount IDs are unique node-wide); nsRead are the namespaces read.
	mounts map[int]uint64
	nsRead map[string]bool
	buf    []byte
	held   heldSet
}

// heldInodes are the inodes among want, on device dev, that some process holds: an open file
// descriptor, a mapped file, its working directory or root (this last only with dirs).
func heldInodes(dev uint64, want map[uint64]bool, dirs bool) heldSet {
	s := &procScan{root: "/proc", dev: dev, want: want, dirs: dirs, mounts: map[int]uint64{}, nsRead: map[string]bool{}, buf: make([]byte, 4096)}
	return s.run()
}

func (s *procScan) run() heldSet {
	s.held = heldSet{inodes: map[uint64]bool{}}
	procs, err := os.ReadDir(s.root)
	if err != nil {
		s.held.unknown = true // nothing can be told: nothing is freed
		return s.held
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		s.process(s.root + "/" + p.Name())
		if s.held.unknown {
			break
		}
	}
	return s.held
}

// read reads a small procfs file into s.buf (grown as needed); nil when it is gone.
func (s *procScan) read(path string) []byte {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(s.buf) {
			s.buf = append(s.buf, make([]byte, len(s.buf))...)
		}
		m, err := unix.Read(fd, s.buf[n:])
		if err != nil {
			return nil
		}
		if m == 0 {
			return s.buf[:n]
		}
		n += m
	}
}

// mountDev is the device of mount id, reading pid's mountinfo if its namespace was not read.
func (s *procScan) mountDev(pid string, id int) (uint64, bool) {
	if dev, ok := s.mounts[id]; ok {
		return dev, true
	}
	ns, err := os.Readlink(pid + "/ns/mnt")
	if err != nil || s.nsRead[ns] {
		return 0, false
	}
	s.nsRead[ns] = true
	if b := s.read(pid + "/mountinfo"); b != nil {
		mountDevices(b, s.mounts)
	}
	dev, ok := s.mounts[id]
	return dev, ok
}

// file records what one descriptor's fdinfo says. link is its /proc magic link: stat'ed for
// the inode on a kernel without ino:, only when its mount is one of the copy tmpfs, and read
// (readlink: the kernel's own name for it, no call into its filesystem) when its mount is
// not listed.
func (s *procScan) file(pid string, fi fdInfo, link string) {
	dev, listed := s.mountDev(pid, fi.mntID)
	if listed && dev != s.dev {
		return // another filesystem's
	}
	if !listed && fi.hasIno && !s.want[fi.ino] {
		return
	}
	if !listed && pseudoFile(link) {
		return // a pipe, socket or anonymous inode: on a kernel-internal mount, never listed
	}
	if fi.hasIno {
		if s.want[fi.ino] {
			s.held.inodes[fi.ino] = true // on the copy tmpfs, or on a detached mount
		}
		return
	}
	if !listed {
		s.held.unknown = true
		return
	}
	// A mount of the copy tmpfs: tmpfs answers from memory.
	var st unix.Stat_t
	if unix.Stat(link, &st) == nil && st.Dev == s.dev && s.want[st.Ino] {
		s.held.inodes[st.Ino] = true
	}
}

// pseudoFile says whether the magic link at link names a file of no mounted filesystem
// ("pipe:[N]", "socket:[N]", "anon_inode:[eventfd]"): those are not paths.
func pseudoFile(link string) bool {
	target, err := os.Readlink(link)
	return err == nil && !strings.HasPrefix(target, "/")
}

func (s *procScan) process(pid string) {
	if fds, err := os.ReadDir(pid + "/fdinfo"); err == nil {
		for _, e := range fds {
			b := s.read(pid + "/fdinfo/" + e.Name())
			if fi, ok := parseFdinfo(b); ok {
				s.file(pid, fi, pid+"/fd/"+e.Name())
			}
		}
	}
	if b := s.read(pid + "/maps"); b != nil {
		for _, ino := range mappedInodes(b, s.dev) {
			if s.want[ino] {
				s.held.inodes[ino] = true
			}
		}
	}
	if !s.dirs {
		return
	}
	for _, link := range []string{"/cwd", "/root"} {
		fd, err := unix.Open(pid+link, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone, or a kernel thread
		}
		self := strconv.Itoa(fd)
		if fi, ok := parseFdinfo(s.read("/proc/self/fdinfo/" + self)); ok {
			// Its mount is looked up in pid's namespace; our descriptor stays open meanwhile,
			// so the stat of a kernel without ino: reaches that very file.
			s.file(pid, fi, "/proc/self/fd/"+self)
		}
		unix.Close(fd)
	}
}
