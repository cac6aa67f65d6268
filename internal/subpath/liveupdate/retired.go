package liveupdate

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
)

// Old versions of live copies.
//
// A version replaced by a newer one is detached at once, but a process that opened one of its
// files (or holds a directory of it, or its cwd is there, or it mapped a file) keeps it until
// it lets go; nothing tells the agent when.
// So a retired version stays charged to its pod (a tenant holding old versions open cannot
// make the node keep more than the pod's budget) and shown in status until a scan of /proc
// (fd, map_files, cwd, root of every process) finds none of its inodes held. The scan runs
// after each update and then every scanInterval, only while retired versions exist. A version
// is unlinked only once nobody holds it (retireGrace after it was replaced at the earliest):
// a process that holds a directory of it open finds every entry there.
//
// The first copy, the base, is the root of the mount the container bound: it cannot be
// unlinked while the container lives. Once shadowed by a layer and held by nobody, its content
// is emptied instead (a file truncated, a directory's entries removed), through a clone of the
// copy tmpfs without its mounts; one page stays charged for the empty inode.

// retiredCopy is an old version of a live copy.
type retiredCopy struct {
	ctr, pod string
	path     string // the version's path (for the base: the live copy's path)
	base     bool
	used     copies.Usage
	// measure says used is not known (a version an earlier agent left): it is what the
	// version holds, counted as the copier charges.
	measure bool
	inodes  map[uint64]bool
	at      time.Time // when it was replaced
}

// retireGrace is how long a replaced version stays at least: an open() whose path walk
// crossed into the old layer just before it was detached finishes on it, and must find its
// directory entries still there.
const retireGrace = 200 * time.Millisecond

// retire records old, just replaced, with its inodes. The scanner looks for the retired
// versions retireGrace later (a version is kept that long anyway): those nobody holds are
// unlinked (a directory's entries must stay while a process holds the directory open, to be
// opened relative to it). One scan of /proc serves every version retired meanwhile: many
// volumes updated at once are not applied one scan after another.
func (f *Follower) retire(old retiredCopy) {
	var held copies.Usage
	old.inodes, held = f.measure(old.path)
	if old.measure {
		old.used = held
	}
	old.at = time.Now()
	f.mu.Lock()
	f.retired = append(f.retired, &old)
	f.startScannerLocked()
	f.mu.Unlock()
	select {
	case f.scanSoon <- struct{}{}:
	default: // a scan is asked for already
	}
}

// rawTree is a clone of the copy tmpfs' root without the mounts on it (open_tree without
// AT_RECURSIVE): below it, a live copy's path is its base's own content.
func (f *Follower) rawTree() (int, error) {
	return unix.OpenTree(unix.AT_FDCWD, f.copier().Dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
}

func (f *Follower) rel(path string) string {
	rel, err := filepath.Rel(f.copier().Dir, path)
	if err != nil {
		return path
	}
	return rel
}

// measure lists the inodes of the copy at path (for a live copy's path, its base's own
// content) and what they hold, counted as the copier charges them.
func (f *Follower) measure(path string) (map[uint64]bool, copies.Usage) {
	raw, err := f.rawTree()
	if err != nil {
		return nil, copies.Usage{}
	}
	defer unix.Close(raw)
	return inodesBelow(raw, f.rel(path))
}

// inodesBelow lists the inode numbers of rel below dirfd and everything below it, and what
// they hold as the copier charges them (entryCost per entry).
func inodesBelow(dirfd int, rel string) (map[uint64]bool, copies.Usage) {
	inodes := map[uint64]bool{}
	var used copies.Usage
	var walk func(dirfd int, name string, depth int)
	walk = func(dirfd int, name string, depth int) {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return
		}
		inodes[st.Ino] = true
		size := int64(0)
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			size = st.Size
		}
		used.Bytes += copies.EntryCost(size)
		used.Entries++
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || depth > 64 {
			return
		}
		fd, err := subpath.Openat2(dirfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: copies.InTree})
		if err != nil {
			return
		}
		d := os.NewFile(uintptr(fd), name)
		defer d.Close()
		names, _ := d.Readdirnames(-1)
		for _, n := range names {
			walk(fd, n, depth+1)
		}
	}
	walk(dirfd, rel, 0)
	return inodes, used
}

// scan frees the retired versions no process holds any more. One scan runs at a time (the
// scanner's, an update's, a caller's): a scan that returns has seen every version freed that
// it found free. A version stays retired, counted in status, until it is freed.
func (f *Follower) scan() {
	f.scanMu.Lock()
	defer f.scanMu.Unlock()
	f.mu.Lock()
	if len(f.retired) == 0 {
		f.mu.Unlock()
		return
	}
	want := map[uint64]bool{}
	for _, r := range f.retired {
		for ino := range r.inodes {
			want[ino] = true
		}
	}
	f.mu.Unlock()
	var st unix.Stat_t
	if err := unix.Stat(f.copier().Dir, &st); err != nil {
		return
	}
	held := heldInodes(st.Dev, want)
	f.mu.Lock()
	var free []*retiredCopy
	for _, r := range f.retired {
		if !holds(r, held) && time.Since(r.at) >= retireGrace {
			free = append(free, r)
		}
	}
	f.mu.Unlock()
	for _, r := range free {
		used := r.used
		if r.base {
			f.emptyBase(r)
			used.Bytes, used.Entries = max(used.Bytes-copies.PageSize, 0), max(used.Entries-1, 0)
		} else {
			_ = os.RemoveAll(r.path)
		}
		f.copier().Release(r.ctr, r.pod, used)
	}
	f.mu.Lock()
	f.retired = slices.DeleteFunc(f.retired, func(r *retiredCopy) bool { return slices.Contains(free, r) })
	f.stopScannerIfIdleLocked()
	f.mu.Unlock()
}

func holds(r *retiredCopy, held map[uint64]bool) bool {
	for ino := range r.inodes {
		if held[ino] {
			return true
		}
	}
	return false
}

// emptyBase empties the content of a base nobody holds: it is shadowed by a layer for good.
func (f *Follower) emptyBase(r *retiredCopy) {
	raw, err := f.rawTree()
	if err != nil {
		return
	}
	defer unix.Close(raw)
	rel := f.rel(r.path)
	var st unix.Stat_t
	if unix.Fstatat(raw, rel, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		fd, err := subpath.Openat2(raw, rel, &unix.OpenHow{Flags: unix.O_WRONLY | unix.O_TRUNC | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK, Resolve: copies.InTree})
		if err == nil {
			unix.Close(fd)
		}
		return
	}
	fd, err := subpath.Openat2(raw, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: copies.InTree})
	if err != nil {
		return
	}
	defer unix.Close(fd)
	removeEntriesAt(fd, 0)
}

// removeEntriesAt removes everything in the directory open at dirfd.
func removeEntriesAt(dirfd, depth int) {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(dup), "dir")
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		if unix.Unlinkat(dirfd, n, 0) == nil {
			continue
		}
		if depth > 64 {
			continue
		}
		fd, err := subpath.Openat2(dirfd, n, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: copies.InTree})
		if err != nil {
			continue
		}
		removeEntriesAt(fd, depth+1)
		unix.Close(fd)
		_ = unix.Unlinkat(dirfd, n, unix.AT_REMOVEDIR)
	}
}

// heldInodes are the inodes among want, on device dev, that some process holds: an open file
// descriptor, a mapped file, its working directory or root.
func heldInodes(dev uint64, want map[uint64]bool) map[uint64]bool {
	held := map[uint64]bool{}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return held
	}
	check := func(p string) {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Dev == dev && want[st.Ino] {
			held[st.Ino] = true
		}
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		dir := "/proc/" + p.Name()
		check(dir + "/cwd")
		check(dir + "/root")
		for _, sub := range []string{"/fd", "/map_files"} {
			entries, err := os.ReadDir(dir + sub)
			if err != nil {
				continue // gone, or no access
			}
			for _, e := range entries {
				check(dir + sub + "/" + e.Name())
			}
		}
	}
	return held
}

// dropRetiredLocked forgets container id's retired versions (the container goes: its processes
// with it). Callers hold f.mu.
func (f *Follower) dropRetiredLocked(id string) {
	kept := f.retired[:0]
	for _, r := range f.retired {
		if r.ctr != id {
			kept = append(kept, r)
		}
	}
	clear(f.retired[len(kept):])
	f.retired = kept
	f.stopScannerIfIdleLocked()
}

// stopScannerIfIdleLocked ends the scanner once no retired version is left. Callers hold f.mu.
func (f *Follower) stopScannerIfIdleLocked() {
	if len(f.retired) == 0 && f.scanner != nil {
		close(f.scanner)
		f.scanner, f.scanned = nil, nil
	}
}

// startScannerLocked starts the goroutine that scans while retired versions exist. Callers
// hold f.mu.
func (f *Follower) startScannerLocked() {
	if f.scanner != nil || f.ctx.Err() != nil {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	f.scanner, f.scanned = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(f.scanInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			case <-f.scanSoon: // a version was retired: free it once retireGrace is over
				select {
				case <-stop:
					return
				case <-time.After(retireGrace):
				}
			}
			f.scan()
		}
	}()
}

func (f *Follower) stopScanner() {
	f.mu.Lock()
	stop, done := f.scanner, f.scanned
	f.scanner, f.scanned = nil, nil
	f.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
