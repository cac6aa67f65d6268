package liveupdate

import (
	"os"
	"path/filepath"
	"slices"
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
// (descriptors, mappings, cwd and root of every process, procheld.go) finds none of its
// inodes held. A version is unlinked only once nobody holds it (retireGrace after it was
// replaced at the earliest): a process that holds a directory of it open finds every entry
// there.
//
// The scan runs on the scanner goroutine alone, only while retired versions exist: kicked
// after each update (retireGrace later, one scan for the kicks meanwhile) and then every
// scanInterval. Never on an update's goroutine nor under
// any lock a request or a save takes: the scan reads no file's attributes, but some procfs
// reads can still wait (procheld.go), and a scan that waits must hold up nothing but the
// freeing of old versions, which then stay charged. One scan runs at a time; a kick while it
// runs is kept for the next one, so a waiting scan leaves no goroutine behind it.
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
	inodes  map[uint64]bool // its inodes; true for a directory's
	at      time.Time       // when it was replaced
}

// retireGrace is how long a replaced version stays at least: an open() whose path walk
// crossed into the old layer just before it was detached finishes on it, and must find its
// directory entries still there.
const retireGrace = 200 * time.Millisecond

// retire records old, just replaced, with its inodes, and kicks the scanner: the versions
// nobody holds are unlinked (a directory's entries must stay while a process holds the
// directory open, to be opened relative to it). It does not wait for the scan: its caller
// holds the path's lock.
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
	select {
	case f.scanKick <- struct{}{}:
	default: // a kick is pending: that scan sees old
	}
	f.mu.Unlock()
}

// rawTree is a clone of the root of the pod's tmpfs that holds path, without the mounts on it
// (open_tree without AT_RECURSIVE), and path relative to it: below it, a live copy's path is
// its base's own content.
func (f *Follower) rawTree(path string) (int, string, error) {
	root := f.copier().PodTmpfs(path)
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return -1, "", err
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, root, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	return fd, rel, err
}

// measure lists the inodes of the copy at path (for a live copy's path, its base's own
// content) and what they hold, counted as the copier charges them.
func (f *Follower) measure(path string) (map[uint64]bool, copies.Usage) {
	raw, rel, err := f.rawTree(path)
	if err != nil {
		return nil, copies.Usage{}
	}
	defer unix.Close(raw)
	return inodesBelow(raw, rel)
}

// inodesBelow lists the inode numbers of rel below dirfd and everything below it (true for a
// directory), and what they hold as the copier charges them (entryCost per entry).
func inodesBelow(dirfd int, rel string) (map[uint64]bool, copies.Usage) {
	inodes := map[uint64]bool{}
	var used copies.Usage
	var walk func(dirfd int, name string, depth int)
	walk = func(dirfd int, name string, depth int) {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return
		}
		inodes[st.Ino] = st.Mode&unix.S_IFMT == unix.S_IFDIR
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
// scanner's, or a test's): a scan that returns has seen every version freed that it found
// free. A version stays retired, counted in status, until it is freed. It takes f.mu only
// to copy and update the list, never while it reads /proc.
func (f *Follower) scan() {
	f.scanMu.Lock()
	defer f.scanMu.Unlock()
	c := f.copier() // not under f.mu: copier takes it
	f.mu.Lock()
	if len(f.retired) == 0 {
		f.mu.Unlock()
		return
	}
	// Each pod's copies are on its own tmpfs: inode numbers are per device.
	want := map[string]map[uint64]bool{}
	dirs := map[string]bool{}
	// Only the versions looked for can be found free: one retired while /proc is read (a
	// scan can outlast retireGrace: under load, or where system calls are slow) waits for
	// the next scan, else a version held open would be freed and uncharged under its reader.
	lookedFor := make(map[*retiredCopy]bool, len(f.retired))
	for _, r := range f.retired {
		lookedFor[r] = true
		root := c.PodTmpfs(r.path)
		if want[root] == nil {
			want[root] = map[uint64]bool{}
		}
		for ino, dir := range r.inodes {
			want[root][ino] = true
			dirs[root] = dirs[root] || dir
		}
	}
	f.scanStart = time.Now()
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.scanStart = time.Time{}
		f.mu.Unlock()
	}()
	held := map[string]heldSet{}
	for root, inodes := range want {
		var st unix.Stat_t
		if err := unix.Stat(root, &st); err != nil {
			// The pod's tmpfs is gone, and with it what was retired there: nothing to hold.
			continue
		}
		held[root] = findHeld(st.Dev, inodes, dirs[root])
	}
	f.mu.Lock()
	var free []*retiredCopy
	for _, r := range f.retired {
		if lookedFor[r] && !held[c.PodTmpfs(r.path)].holds(r) && time.Since(r.at) >= retireGrace {
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

// findHeld is heldInodes; a test replaces it to make a scan wait as one on a hung mount would.
var findHeld = heldInodes

// emptyBase empties the content of a base nobody holds: it is shadowed by a layer for good.
func (f *Follower) emptyBase(r *retiredCopy) {
	raw, rel, err := f.rawTree(r.path)
	if err != nil {
		return
	}
	defer unix.Close(raw)
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

// testHookDirRead, when set, is called by removeEntriesAt while it reads a directory: a test
// forks a process there to see which descriptors it would inherit.
var testHookDirRead func()

// removeEntriesAt removes everything in the directory open at dirfd.
func removeEntriesAt(dirfd, depth int) {
	// Reading the names takes a descriptor of its own (os.File closes it). Close-on-exec like
	// every other descriptor of the agent's: it is a directory inside a clone of the whole copy
	// tmpfs (every pod's secrets), and a mount helper forked meanwhile must not inherit it.
	dup, err := unix.FcntlInt(uintptr(dirfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	if testHookDirRead != nil {
		testHookDirRead()
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

// stopScannerIfIdleLocked ends the scanner once no retired version is left (a scan under way
// finishes first). Callers hold f.mu.
func (f *Follower) stopScannerIfIdleLocked() {
	if len(f.retired) == 0 && f.scanner != nil {
		close(f.scanner)
		f.scanner, f.scanned, f.scanKick = nil, nil, nil
	}
}

// startScannerLocked starts the goroutine that scans while retired versions exist: at each
// kick (retire), retireGrace after it, and every scanInterval. Callers hold f.mu.
func (f *Follower) startScannerLocked() {
	if f.scanner != nil || f.ctx.Err() != nil {
		return
	}
	stop, done, kick := make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
	f.scanner, f.scanned, f.scanKick = stop, done, kick
	go func() {
		defer close(done)
		t := time.NewTicker(f.scanInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			case <-kick:
				// What the kick retired cannot be freed before retireGrace: the scan waits
				// that long and serves every kick meanwhile. A rollout that updates many
				// volumes at once retires a version each, and scans of /proc back to back
				// would take the CPU their updates need.
				select {
				case <-stop:
					return
				case <-time.After(retireGrace):
				}
				select {
				case <-kick:
				default:
				}
			}
			f.scan()
		}
	}()
}

// scanStalled is how long a scan may run before status reports it (scanningFor): one that
// waits on the kernel holds up only the freeing of old versions.
const scanStalled = 10 * time.Second

// stopScanner ends the scanner and waits for it, at most scanCloseWait: a scan waiting in
// the kernel (procheld.go) must not keep the agent from closing; its goroutine ends when the
// read returns.
func (f *Follower) stopScanner() {
	f.mu.Lock()
	stop, done := f.scanner, f.scanned
	f.scanner, f.scanned, f.scanKick = nil, nil, nil
	f.mu.Unlock()
	if stop != nil {
		close(stop)
		select {
		case <-done:
		case <-time.After(scanCloseWait):
		}
	}
}

const scanCloseWait = 5 * time.Second
