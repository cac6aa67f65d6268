package liveupdate

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/subpathtest"

	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestLiveCopiesReadOnly: configMap, secret, downwardAPI and projected volumes are read-only
// in a container, and so must every mount a live copy puts at its path be, from the moment
// it exists: the base, each layer, and the detached clone they are made from. A "container"
// (the reader: rslave binds of the copies, remounted read-only as runc does for kubelet's
// "ro") holds the paths; after an update every mount at each path, on the host and in the
// container, is read-only, and writing the file or creating a file in the directory through
// the path fails with EROFS, leaving the copy tmpfs as it was.
func TestLiveCopiesReadOnly(t *testing.T) {
	if !privatens.Run(t) || !liveHere(t) {
		return
	}
	s := newLiveSetup(t, bigBudget, payload(0))
	for _, p := range []string{s.fileCopy, s.dirCopy} {
		checkReadOnlyMounts(t, "before any update, on the host", p)
	}
	r := newReader(t, s.fileCopy, s.dirCopy)
	var err error
	r.do(func() {
		for _, p := range []string{r.file, r.dir} {
			if err == nil {
				err = unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
			}
		}
	})
	subpathtest.Must(t, err)
	s.f.Arm("ctr1", 0)
	s.k.WriteAtomic(s.vol, payload(1))
	for _, u := range s.wait(t, 2) {
		if u.Result != UpdateApplied {
			t.Fatalf("update: %+v", u)
		}
	}
	for _, p := range []string{s.fileCopy, s.dirCopy} {
		checkReadOnlyMounts(t, "after an update, on the host", p)
	}
	used := tmpfsUsed(t, s.c.Dir)
	r.do(func() {
		for _, p := range []string{r.file, r.dir} {
			checkReadOnlyMounts(t, "after an update, in the container", p)
		}
		tryWrites(t, r.file, r.dir)
	})
	tryWrites(t, s.fileCopy, s.dirCopy) // the host's own view of the path, through the layer
	r.do(func() {
		if v, err := r.readFile(); v != 1 || err != nil {
			t.Errorf("after the writes were refused the reader reads version %d (%v), want 1", v, err)
		}
	})
	if now := tmpfsUsed(t, s.c.Dir); now > used {
		t.Errorf("the copy tmpfs grew from %d to %d bytes through the container's paths", used, now)
	}

	// The detached clone a base or layer is made from is read-only before it is attached.
	n, tree, err := privateClone(s.fileCopy+".v1", -1)
	subpathtest.Must(t, err)
	defer n.Close() // left open, it holds version 1's inode for the tests after this one
	defer tree.Close()
	var sfs unix.Statfs_t
	subpathtest.Must(t, unix.Fstatfs(tree.FD(), &sfs))
	if sfs.Flags&unix.ST_RDONLY == 0 {
		t.Errorf("the detached clone of a version is writable (statfs flags %#x)", sfs.Flags)
	}
}

// checkReadOnlyMounts fails t unless every mount at path in the calling thread's mount
// namespace is read-only (its per-mount options in mountinfo) and statfs through path says so.
func checkReadOnlyMounts(t *testing.T, where, path string) {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[4] != path {
			continue
		}
		n++
		if opts := strings.Split(f[5], ","); opts[0] != "ro" {
			t.Errorf("%s: mount %d at %s is %s: %s", where, n, path, opts[0], line)
		}
	}
	if n == 0 {
		t.Errorf("%s: no mount at %s", where, path)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil || sfs.Flags&unix.ST_RDONLY == 0 {
		t.Errorf("%s: statfs %s: flags %#x (%v), want ST_RDONLY", where, path, sfs.Flags, err)
	}
}

// tryWrites writes the file subPath at file and creates a 1 MiB file in the directory subPath
// at dir, as the file's owner (root here): both must fail with EROFS.
func tryWrites(t *testing.T, file, dir string) {
	t.Helper()
	if f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0); !errors.Is(err, unix.EROFS) {
		t.Errorf("open %s for writing: %v, want EROFS", file, err)
		if err == nil {
			f.Close()
		}
	}
	big := filepath.Join(dir, "big")
	err := os.WriteFile(big, make([]byte, 1<<20), 0o644)
	if !errors.Is(err, unix.EROFS) {
		t.Errorf("create %s: %v, want EROFS", big, err) // left: the tmpfs check shows it too
	}
}

// TestRemoveReadOnlyLiveDirectory: a container's copies are removed with their mounts when the
// first one met below its directory is a live directory subPath, whose read-only layer refuses
// the removal of its entries (EROFS) before any mount point refuses its own (EBUSY).
func TestRemoveReadOnlyLiveDirectory(t *testing.T) {
	if !privatens.Run(t) || !liveHere(t) {
		return
	}
	k := subpathtest.NewKubelet(t)
	vol := k.Volume(subpathtest.ConfigMap, "cfg", true)
	k.WriteAtomic(vol, payload(0))
	dirT := subpathtest.Bind(k, subpath.ParseTarget, vol, "cfg", "app", 0, "conf")
	c := newCopies(t, k, bigBudget)
	cps, _, fbs := c.CopySources(context.Background(), "ctr1", []string{dirT.Path})
	if len(cps) != 1 || len(fbs) != 0 {
		t.Fatalf("copies %v, fallbacks %v", cps, fbs)
	}
	cps[0].Live = true
	updates := make(chan Update, 10)
	f := NewFollower(c, filepath.Join(t.TempDir(), "live.json"), func(u Update) { updates <- u })
	defer f.Close()
	if failed := f.Track("ctr1", cps); len(failed) != 0 {
		t.Fatalf("Track: %v", failed)
	}
	f.Arm("ctr1", 0)
	k.WriteAtomic(vol, payload(1))
	select {
	case u := <-updates:
		if u.Result != UpdateApplied {
			t.Fatalf("update: %+v", u)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no update in 20s")
	}
	f.Stop("ctr1")
	if err := c.Remove("ctr1"); err != nil {
		t.Errorf("Remove: %v", err)
	}
	if _, err := os.Lstat(cps[0].Path); !os.IsNotExist(err) {
		t.Errorf("the live copy is left after Remove: %v", err)
	}
	if n := mountsHere(t, cps[0].Path); n != 0 {
		t.Errorf("%d mounts left at %s after Remove", n, cps[0].Path)
	}
}

// TestEmptyBaseLeaksNoDescriptor: a process forked while a base is emptied (a mount helper the
// agent runs meanwhile) inherits no descriptor of the emptying: they are directories inside a
// clone of the whole copy tmpfs, every pod's secrets.
func TestEmptyBaseLeaksNoDescriptor(t *testing.T) {
	if !privatens.Run(t) || !liveHere(t) {
		return
	}
	s := newLiveSetup(t, bigBudget, payload(0))
	s.f.Arm("ctr1", 0)
	s.k.WriteAtomic(s.vol, payload(1))
	s.wait(t, 2) // the directory's base is shadowed now
	fds := func() []string {
		out, err := exec.Command("/bin/sh", "-c", "ls -l /proc/self/fd/ | tail -n +2").Output()
		if err != nil {
			t.Errorf("list a child's descriptors: %v", err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	before := fds()
	var during []string
	testHookDirRead = func() {
		if during == nil {
			during = fds()
		}
	}
	defer func() { testHookDirRead = nil }()
	s.f.emptyBase(&retiredCopy{path: s.dirCopy, base: true})
	if during == nil {
		t.Fatal("the base was not emptied: no directory read")
	}
	if len(during) != len(before) {
		t.Errorf("a process forked while the base is emptied inherits %d descriptors, %d otherwise:\n%s\nwithout:\n%s",
			len(during), len(before), strings.Join(during, "\n"), strings.Join(before, "\n"))
	}
	raw, rel, err := s.f.rawTree(s.dirCopy)
	subpathtest.Must(t, err)
	defer unix.Close(raw)
	if _, used := inodesBelow(raw, rel); used.Entries != 1 {
		t.Errorf("the emptied base holds %d entries, want 1 (itself)", used.Entries)
	}
}
