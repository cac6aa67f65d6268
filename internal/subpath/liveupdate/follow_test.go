package liveupdate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/internal/subpath/subpathtest"

	"github.com/mountkeeper/mountkeeper/test/privatens"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// TestFollowerInNamespace runs live subPath updates with real mounts: a reader in a mount
// namespace of its own holds rslave binds of the copies, as a container does.
func TestFollowerInNamespace(t *testing.T) {
	if !privatens.Run(t) || !liveHere(t) {
		return
	}
	t.Run("atomic updates: every read whole, every open after a switch new", testFollow100)
	t.Run("a version over the pod's budget is not applied", testFollowBudget)
	t.Run("versions pinned after their removal count against the pod's tmpfs", testFollowPinned)
	t.Run("a symlink out of the volume in the new ..data is refused", testFollowSymlinkOut)
	t.Run("a new Follower resumes from the state file and applies a missed update", testFollowResume)
	t.Run("Close records the layer its worker put while it closed, not the update it gave up", testFollowCloseSaves)
}

// atomicUpdates is how many updates testFollow100 applies: 100, or 20 in the kernel matrix's
// guests (MOUNTKEEPER_VM_KERNEL set), where every system call is 10-17 times slower under
// QEMU's TCG and 100 took minutes; 20 still pass many switches under a reader in a tight loop.
func atomicUpdates() int {
	if os.Getenv("MOUNTKEEPER_VM_KERNEL") != "" {
		return 20
	}
	return 100
}

// version is the content of version v of a file of the volume: a header naming v, then enough
// to span several pages, so that a partial or mixed read shows.
func version(v int, name string, size int) string {
	head := fmt.Sprintf("v%03d %s|", v, name)
	return head + strings.Repeat(string(rune('a'+v%26)), size-len(head))
}

// parseVersion returns the version of a whole file read as content, or an error saying why
// it is not one.
func parseVersion(b []byte, name string, size int) (int, error) {
	if len(b) == 0 {
		return 0, errors.New("empty")
	}
	if len(b) != size {
		return 0, fmt.Errorf("partial: %d bytes of %d", len(b), size)
	}
	v, err := strconv.Atoi(string(b[1:4]))
	if err != nil || string(b) != version(v, name, size) {
		return 0, fmt.Errorf("mixed content %q...", b[:min(len(b), 16)])
	}
	return v, nil
}

const (
	fileSize = 3*4096 + 17
	dirSize  = 4096 + 5
)

func payload(v int) map[string]subpathtest.Entry {
	return map[string]subpathtest.Entry{
		"app.conf": subpathtest.File(version(v, "app.conf", fileSize)),
		"conf/a":   subpathtest.File(version(v, "a", dirSize)),
		"conf/b":   subpathtest.File(version(v, "b", dirSize)),
	}
}

// liveSetup is a pod with a configMap volume, a file and a directory subPath of container
// "ctr1" copied live, and a Follower that reports its updates on a channel.
type liveSetup struct {
	k          *subpathtest.Kubelet
	vol        string
	c          *copies.Copies
	f          *Follower
	copies     []copies.Copy
	updates    chan Update
	statePath  string
	fileCopy   string
	dirCopy    string
	goroutines int
	refused    map[string]error
}

func newLiveSetup(t *testing.T, b copies.Budget, first map[string]subpathtest.Entry) *liveSetup {
	t.Helper()
	return newLiveSetupOn(t, b, first, nil)
}

// newLiveSetupOn is newLiveSetup with the Follower's canBeneath replaced (nil: the kernel's);
// copies Track refused are in refused, where a replacement was given.
func newLiveSetupOn(t *testing.T, b copies.Budget, first map[string]subpathtest.Entry, canBeneath func() error) *liveSetup {
	t.Helper()
	k := subpathtest.NewKubelet(t)
	s := &liveSetup{k: k, updates: make(chan Update, 1000), goroutines: runtime.NumGoroutine()}
	s.vol = k.Volume(subpathtest.ConfigMap, "cfg", true)
	k.WriteAtomic(s.vol, first)
	fileT := subpathtest.Bind(k, subpath.ParseTarget, s.vol, "cfg", "app", 0, "app.conf")
	dirT := subpathtest.Bind(k, subpath.ParseTarget, s.vol, "cfg", "app", 1, "conf")
	s.c = newCopies(t, k, b)
	copies, rest, fbs := s.c.CopySources(context.Background(), "ctr1", []string{fileT.Path, dirT.Path})
	if len(copies) != 2 || len(rest) != 0 || len(fbs) != 0 {
		t.Fatalf("copies %v, rest %v, fallbacks %v", copies, rest, fbs)
	}
	for i := range copies {
		copies[i].Live = true
	}
	s.copies = copies
	s.fileCopy, s.dirCopy = copies[0].Path, copies[1].Path
	s.statePath = filepath.Join(t.TempDir(), "live.json")
	s.f = NewFollower(s.c, s.statePath, func(u Update) { s.updates <- u })
	if canBeneath != nil {
		s.f.canBeneath = canBeneath
	}
	t.Cleanup(func() {
		s.f.Close()
		subpathtest.Must(t, s.c.Remove("ctr1"))
	})
	if failed := s.f.Track("ctr1", copies); len(failed) != 0 {
		if canBeneath != nil {
			s.refused = failed
			return s
		}
		t.Fatalf("Track: %v", failed)
	}
	return s
}

// liveHere says whether this kernel can run live updates (Linux >= 6.5: MOVE_MOUNT_BENEATH).
// Where it cannot, it checks instead that the Follower refuses them, saying why, as it does
// on such a node, and the caller returns: the refusal is what runs there.
func liveHere(t *testing.T) bool {
	t.Helper()
	err := mounttable.CanMountBeneath()
	if err == nil {
		return true
	}
	t.Logf("this kernel cannot mount beneath a mount (%v): the Follower refuses live copies, checked instead", err)
	checkRefused(t, mounttable.CanMountBeneath)
	return false
}

// checkRefused: with a kernel that cannot mount beneath (canBeneath fails), Track refuses
// every live copy with the reason and leaves it a static copy: no mount point of its own,
// the first content still there.
func checkRefused(t *testing.T, canBeneath func() error) {
	t.Helper()
	s := newLiveSetupOn(t, bigBudget, payload(0), canBeneath)
	if len(s.refused) != 2 {
		t.Fatalf("Track on a kernel without MOVE_MOUNT_BENEATH refused %d of 2 live copies: %v", len(s.refused), s.refused)
	}
	for path, err := range s.refused {
		if !errors.Is(err, subpath.ErrNoBeneath) || !strings.Contains(err.Error(), "Linux 6.5 or newer") {
			t.Errorf("refusal of %s: %v; want one wrapping ErrNoBeneath that names Linux 6.5", path, err)
		}
		if n := mountsHere(t, path); n != 0 {
			t.Errorf("%s refused, yet %d mounts are on it", path, n)
		}
	}
	if b, err := os.ReadFile(s.fileCopy); err != nil || string(b) != version(0, "app.conf", fileSize) {
		t.Errorf("the refused copy %s no longer holds its first content: %v", s.fileCopy, err)
	}
	if st := s.f.Status(); st.Paths != 0 {
		t.Errorf("a refused copy shows in the Follower's status: %+v", st)
	}
}

// TestFollowerRefusesWithoutBeneath: on a kernel older than 6.5 (faked here, real in the
// kernel matrix's guests) no copy is made live.
func TestFollowerRefusesWithoutBeneath(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	checkRefused(t, func() error { return errors.New("the kernel does not know MOVE_MOUNT_BENEATH (faked)") })
}

// wait waits for n updates and returns them.
func (s *liveSetup) wait(t *testing.T, n int) []Update {
	t.Helper()
	var got []Update
	timeout := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case u := <-s.updates:
			got = append(got, u)
		case <-timeout:
			t.Fatalf("%d of %d updates after 20s: %+v", len(got), n, got)
		}
	}
	return got
}

// reader is a "container": a thread in a mount namespace of its own where / is rslave (as
// runc makes it) and the copies are bound with MS_BIND|MS_REC and made rslave, as the runtime
// binds a live subPath.
type reader struct {
	file, dir string // where the copies are bound in its namespace
	reqs      chan func()
	done      chan struct{}
}

func newReader(t *testing.T, fileCopy, dirCopy string) *reader {
	t.Helper()
	base := t.TempDir()
	r := &reader{file: filepath.Join(base, "app.conf"), dir: filepath.Join(base, "conf"), reqs: make(chan func()), done: make(chan struct{})}
	subpathtest.Must(t, os.WriteFile(r.file, nil, 0o644))
	subpathtest.Must(t, os.Mkdir(r.dir, 0o755))
	ready := make(chan error)
	go func() {
		defer close(r.done)
		runtime.LockOSThread() // never unlocked: the thread ends with its namespace
		err := unix.Unshare(unix.CLONE_NEWNS)
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, "")
		}
		for _, b := range [][2]string{{fileCopy, r.file}, {dirCopy, r.dir}} {
			if err == nil {
				err = unix.Mount(b[0], b[1], "", unix.MS_BIND|unix.MS_REC, "")
			}
			if err == nil {
				err = unix.Mount("", b[1], "", unix.MS_SLAVE|unix.MS_REC, "")
			}
		}
		ready <- err
		if err != nil {
			return
		}
		for f := range r.reqs {
			f()
		}
	}()
	subpathtest.Must(t, <-ready)
	t.Cleanup(r.close)
	return r
}

// do runs f in the reader's namespace.
func (r *reader) do(f func()) {
	ran := make(chan struct{})
	r.reqs <- func() { defer close(ran); f() } // f must not call t.Fatal: the thread is the namespace
	<-ran
}

func (r *reader) close() {
	select {
	case <-r.done:
		return
	default:
	}
	close(r.reqs)
	<-r.done
}

// readFile reads the file subPath: its version or what is wrong.
func (r *reader) readFile() (int, error) {
	b, err := os.ReadFile(r.file)
	if err != nil {
		return 0, err
	}
	return parseVersion(b, "app.conf", fileSize)
}

// readDir reads the directory subPath through one descriptor of it: both files must be of
// the same version.
func (r *reader) readDir() (int, error) {
	fd, err := unix.Open(r.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var vs [2]int
	for i, name := range []string{"a", "b"} {
		f, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		file := os.NewFile(uintptr(f), name)
		b := make([]byte, dirSize+1)
		n, err := readFull(file, b)
		file.Close()
		if err != nil {
			return 0, err
		}
		if vs[i], err = parseVersion(b[:n], name, dirSize); err != nil {
			return 0, err
		}
	}
	if vs[0] != vs[1] {
		return 0, fmt.Errorf("the directory mixes versions %d and %d", vs[0], vs[1])
	}
	return vs[0], nil
}

func readFull(f *os.File, b []byte) (int, error) {
	n, err := io.ReadFull(f, b)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = nil
	}
	return n, err
}

// mountsHere counts the mounts at path in the calling thread's mount namespace.
func mountsHere(t *testing.T, path string) int {
	ms, err := testsupport.MountsAt(path)
	subpathtest.Must(t, err)
	return len(ms)
}

// tmpfsUsed is what the copy tmpfs holds, in bytes.
func tmpfsUsed(t *testing.T, dir string) int64 {
	var st unix.Statfs_t
	subpathtest.Must(t, unix.Statfs(dir, &st))
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// testFollow100: 100 atomic-writer updates while the reader reads both subPaths in a tight
// loop: no empty, partial, mixed, ENOENT or EBUSY read; versions never go back; an open after
// each switch sees the new version; a descriptor opened before a switch keeps the old one; at
// most 3 mounts at the reader's path and 2 at the copy's (the reader's own bind, or the base,
// and at most 2 layers); after the updates, 2 at the copy's path; the copy tmpfs holds one
// copy per path again; a version held open is retired (counted) until it is closed.
func testFollow100(t *testing.T) {
	n := atomicUpdates()
	s := newLiveSetup(t, bigBudget, payload(0))
	// The scanner runs beside the test's own scans, as it does beside status and metrics.
	s.f.scanInterval = 5 * time.Millisecond
	used0 := tmpfsUsed(t, s.c.Dir)
	r := newReader(t, s.fileCopy, s.dirCopy)
	opener := newReader(t, s.fileCopy, s.dirCopy) // opens once after each switch
	s.f.Arm("ctr1", 0)

	// The tight loop runs on the reader's thread between the test's requests.
	stop := make(chan struct{})
	type bad struct{ what, err string }
	result := make(chan []bad, 1)
	maxMounts := 0
	go r.do(func() {
		var bads []bad
		last := [2]int{}
		for i := 0; ; i++ {
			select {
			case <-stop:
				result <- bads
				return
			default:
			}
			for j, read := range []func() (int, error){r.readFile, r.readDir} {
				v, err := read()
				switch {
				case err != nil:
					if len(bads) < 20 {
						bads = append(bads, bad{[]string{"file", "dir"}[j], err.Error()})
					}
				case v < last[j]:
					bads = append(bads, bad{[]string{"file", "dir"}[j], fmt.Sprintf("version %d after %d", v, last[j])})
				default:
					last[j] = v
				}
			}
			if i%50 == 0 {
				maxMounts = max(maxMounts, mountsHere(t, r.file), mountsHere(t, r.dir))
			}
		}
	})
	maxHost := 0
	var held *os.File
	for v := 1; v <= n; v++ {
		s.k.WriteAtomic(s.vol, payload(v))
		for _, u := range s.wait(t, 2) {
			if u.Result != UpdateApplied || u.Version != v {
				t.Fatalf("update %d: %+v", v, u)
			}
		}
		maxHost = max(maxHost, mountsHere(t, s.fileCopy), mountsHere(t, s.dirCopy))
		opener.do(func() {
			for _, read := range []func() (int, error){opener.readFile, opener.readDir} {
				if got, err := read(); got != v || err != nil {
					t.Errorf("an open after update %d was applied reads version %d (%v)", v, got, err)
				}
			}
		})
		if v == n-1 {
			var err error
			if held, err = os.Open(s.fileCopy); err != nil { // the same layer as the reader's
				t.Fatal(err)
			}
		}
	}
	close(stop)
	bads := <-result
	for _, b := range bads {
		t.Errorf("reader: %s: %s", b.what, b.err)
	}
	t.Logf("most mounts seen at a subPath: %d in the reader's namespace, %d at the copy's path", maxMounts, maxHost)
	if maxMounts > 3 {
		t.Errorf("the reader saw %d mounts at a subPath, want at most 3 (its bind and 2 layers)", maxMounts)
	}
	if maxHost > 3 {
		t.Errorf("%d mounts at a copy's path, want at most 3 (base and 2 layers)", maxHost)
	}
	// Every open now sees the last version; the file opened before the last update the old one.
	r.do(func() {
		if v, err := r.readFile(); v != n || err != nil {
			t.Errorf("after %d updates the reader opens version %d (%v)", n, v, err)
		}
		if v, err := r.readDir(); v != n || err != nil {
			t.Errorf("after %d updates the reader opens directory version %d (%v)", n, v, err)
		}
	})
	b := make([]byte, fileSize)
	got, _ := held.ReadAt(b, 0)
	if v, err := parseVersion(b[:got], "app.conf", fileSize); v != n-1 || err != nil {
		t.Errorf("a descriptor opened before update %d reads version %d (%v), want %d", n, v, err, n-1)
	}
	for _, p := range []string{s.fileCopy, s.dirCopy} {
		if m := mountsHere(t, p); m != 2 {
			t.Errorf("%d mounts at %s after %d updates, want 2 (base and one layer)", m, p, n)
		}
	}
	// Memory: version n-1's file is held open, so retired and counted.
	time.Sleep(retireGrace) // not an assertion on time: versions younger are kept anyway
	s.f.scan()
	if st := s.f.Status(); st.RetiredCopies != 1 || st.RetiredBytes < fileSize {
		t.Errorf("with version %d held open: status %+v, want 1 retired copy of at least %d bytes", n-1, st, fileSize)
	}
	held.Close()
	s.f.scan()
	if st := s.f.Status(); st.RetiredCopies != 0 || st.RetiredBytes != 0 || st.Updates[UpdateApplied] != int64(2*n) {
		t.Errorf("after close: status %+v, want nothing retired and %d updates applied", st, 2*n)
	}
	// The kernel frees a removed version's blocks when the last reference to its inode goes,
	// and a lazily detached layer (its mount holds the version's root) is released after
	// umount2 returns, from deferred work: under load the count lagged once in CI, so it is
	// polled until it is back (a hang guard of 10 s, not a timing bound).
	used := tmpfsUsed(t, s.c.Dir)
	for deadline := time.Now().Add(10 * time.Second); used > used0 && time.Now().Before(deadline); used = tmpfsUsed(t, s.c.Dir) {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("copy tmpfs: %d bytes with the first copies, %d after %d updates", used0, used, n)
	if used > used0 {
		t.Errorf("the copy tmpfs holds %d bytes after %d updates, %d with the first copies: want one copy per path", used, n, used0)
	}
	r.close()
	opener.close()
	s.f.Stop("ctr1")
	if g := waitGoroutines(s.goroutines); g > s.goroutines {
		t.Errorf("%d goroutines after Stop, %d before the Follower", g, s.goroutines)
	}
}

// waitGoroutines waits, bounded, for the goroutine count to fall to want.
func waitGoroutines(want int) int {
	g := runtime.NumGoroutine()
	for i := 0; i < 100 && g > want; i++ {
		time.Sleep(10 * time.Millisecond)
		g = runtime.NumGoroutine()
	}
	return g
}

// testFollowBudget: a version bigger than what is left of the pod's budget is not applied
// (over_budget), leaves nothing behind, and the reader keeps the content it has.
func testFollowBudget(t *testing.T) {
	b := bigBudget
	b.PodBytes = 64 << 10 // the first copies take 5 pages, a second version of them fits too
	s := newLiveSetup(t, b, payload(0))
	r := newReader(t, s.fileCopy, s.dirCopy)
	s.f.Arm("ctr1", 0)
	big := payload(1)
	big["app.conf"] = subpathtest.File(strings.Repeat("x", 128<<10))
	s.k.WriteAtomic(s.vol, big)
	got := s.wait(t, 2)
	if got[0].Result != UpdateOverBudget || !errors.Is(got[0].Err, subpath.ErrOverBudget) {
		t.Errorf("update of the file subPath beyond the budget: %+v", got[0])
	}
	if got[1].Result != UpdateApplied {
		t.Errorf("update of the directory subPath within the budget: %+v", got[1])
	}
	r.do(func() {
		if v, err := r.readFile(); v != 0 || err != nil {
			t.Errorf("after a refused update the reader reads version %d (%v), want 0", v, err)
		}
		if v, err := r.readDir(); v != 1 || err != nil {
			t.Errorf("the directory reads version %d (%v), want 1", v, err)
		}
	})
	if _, err := os.Lstat(s.fileCopy + ".v1"); !os.IsNotExist(err) {
		t.Errorf("the version given up is left: %v", err)
	}
}

// testFollowPinned: the container pins each version of its file subPath through a descriptor
// passed over a unix socket (held in no process's fd table: the /proc scan finds the version
// unheld, removes it and returns its charge) while its configMap is updated 8 times, 1 MiB a
// version. The pages stay, on the pod's own tmpfs, sized to its budget: what the pod holds,
// pinned and live, never passes the budget, and the updates that no longer fit are not
// applied (over_budget); the container keeps the content it has.
func testFollowPinned(t *testing.T) {
	b := bigBudget
	b.PodBytes = 4 << 20
	big := func(v int) map[string]subpathtest.Entry {
		p := payload(v)
		p["app.conf"] = subpathtest.File(version(v, "app.conf", 1<<20))
		return p
	}
	s := newLiveSetup(t, b, big(0))
	r := newReader(t, s.fileCopy, s.dirCopy)
	s.f.Arm("ctr1", 0)
	pod := s.c.PodTmpfs(s.fileCopy)
	var sfs, node unix.Statfs_t
	subpathtest.Must(t, unix.Statfs(pod, &sfs))
	subpathtest.Must(t, unix.Statfs(s.c.Dir, &node))
	if sfs.Fsid == node.Fsid {
		t.Errorf("the pod's copies at %s are not on a tmpfs of its own", pod)
	}
	applied, overBudget, shown := 0, 0, 0
	for v := 1; v <= 8; v++ {
		subpathtest.PinInFlight(t, s.fileCopy) // the version shown now
		s.k.WriteAtomic(s.vol, big(v))
		for _, u := range s.wait(t, 2) {
			if u.Copy.Path != s.fileCopy {
				continue
			}
			switch u.Result {
			case UpdateApplied:
				applied++
				shown = u.Version
			case UpdateOverBudget:
				overBudget++
			default:
				t.Fatalf("update %d of the pinned file: %+v, want applied or over_budget", v, u)
			}
		}
		// Every version the container let go of (as far as /proc shows) is freed and its
		// charge returned before the next update.
		deadline := time.Now().Add(10 * time.Second)
		for s.f.Status().RetiredCopies > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		subpathtest.Must(t, unix.Statfs(pod, &sfs))
		if used := int64(sfs.Blocks-sfs.Bfree) * sfs.Bsize; used > b.PodBytes {
			t.Errorf("update %d: the pod holds %d bytes, pinned and live, past its podBytes %d", v, used, b.PodBytes)
		}
	}
	if overBudget == 0 {
		t.Errorf("8 updates of 1 MiB, each version pinned: %d applied, none over budget; want the pod's 4 MiB to stop them", applied)
	}
	r.do(func() {
		head := make([]byte, 4)
		f, err := os.Open(r.file)
		if err == nil {
			_, err = io.ReadFull(f, head)
			f.Close()
		}
		if want := fmt.Sprintf("v%03d", shown); string(head) != want || err != nil {
			t.Errorf("the container reads %q (%v), want %q, the last version applied", head, err, want)
		}
	})
	t.Logf("8 updates of 1 MiB, each version pinned: %d applied, %d over budget", applied, overBudget)
}

// testFollowSymlinkOut: a new ..data whose key is a symlink out of the volume (absolute, and
// relative through ..) is refused; the reader keeps the content it has and no file outside
// is copied.
func testFollowSymlinkOut(t *testing.T) {
	s := newLiveSetup(t, bigBudget, payload(0))
	r := newReader(t, s.fileCopy, s.dirCopy)
	s.f.Arm("ctr1", 0)
	outFile, outDir := subpathtest.Outside(t)
	for i, hostile := range []map[string]subpathtest.Entry{
		{"app.conf": subpathtest.Symlink(outFile), "conf": subpathtest.Symlink(outDir)},
		{"app.conf": subpathtest.Symlink("../../../../../../../../.." + outFile), "conf": subpathtest.Symlink("../../../../../../../../.." + outDir)},
	} {
		s.k.WriteAtomic(s.vol, hostile)
		for _, u := range s.wait(t, 2) {
			if u.Result != UpdateRefused {
				t.Errorf("hostile update %d: %+v, want refused", i, u)
			}
		}
		r.do(func() {
			if v, err := r.readFile(); v != 0 || err != nil {
				t.Errorf("after hostile update %d the reader reads version %d (%v)", i, v, err)
			}
			if v, err := r.readDir(); v != 0 || err != nil {
				t.Errorf("after hostile update %d the directory reads version %d (%v)", i, v, err)
			}
		})
	}
}

// testFollowResume: the agent goes, an update lands while it is away, and a new Follower
// resumes from the state file and applies it at once; then it follows the next one. The state
// file it finds is the one written at Track, before the first agent's two updates (an agent
// killed between an update's mount and its save leaves one behind its mounts; so did one
// closed while its worker applied an update): the new Follower takes the version in force
// from the mounts, numbers on after every version left, and retires the first agent's old
// versions, the one still held open counted until it is closed and then freed.
func testFollowResume(t *testing.T) {
	s := newLiveSetup(t, bigBudget, payload(0))
	stale, err := os.ReadFile(s.statePath) // version 0 of both paths
	subpathtest.Must(t, err)
	used0 := tmpfsUsed(t, s.c.Dir)
	r := newReader(t, s.fileCopy, s.dirCopy)
	s.f.Arm("ctr1", 0)
	s.k.WriteAtomic(s.vol, payload(1))
	s.wait(t, 2)
	held, err := os.Open(s.fileCopy) // version 1, retired by the first agent at the next update
	subpathtest.Must(t, err)
	defer held.Close()
	s.k.WriteAtomic(s.vol, payload(2))
	s.wait(t, 2)
	s.f.Close()
	subpathtest.Must(t, os.WriteFile(s.statePath, stale, 0o600))
	s.k.WriteAtomic(s.vol, payload(3)) // missed
	r.do(func() {
		if v, _ := r.readFile(); v != 2 {
			t.Errorf("the reader reads version %d with the agent away, want 2", v)
		}
	})
	s.f = NewFollower(s.c, s.statePath, func(u Update) { s.updates <- u })
	n, err := s.f.Resume(map[string]bool{"ctr1": true})
	if n != 2 || err != nil {
		t.Fatalf("Resume = %d, %v; want 2 live copies", n, err)
	}
	for _, u := range s.wait(t, 2) {
		if u.Result != UpdateApplied || u.Version != 3 {
			t.Errorf("missed update: %+v, want version 3 applied", u)
		}
	}
	// Left by the first agent: version 1 of both (the file's held open) and the bases; then
	// version 2, replaced now. Only the held one stays.
	waitRetired(t, s.f, 1)
	held.Close()
	waitRetired(t, s.f, 0)
	for _, p := range []string{s.fileCopy, s.dirCopy} {
		for _, v := range []string{".v1", ".v2"} {
			if _, err := os.Lstat(p + v); !os.IsNotExist(err) {
				t.Errorf("%s%s, replaced, is left after resuming: %v", p, v, err)
			}
		}
	}
	if used := tmpfsUsed(t, s.c.Dir); used > used0 {
		t.Errorf("the copy tmpfs holds %d bytes after resuming, %d with the first copies: want one copy per path", used, used0)
	}
	s.k.WriteAtomic(s.vol, payload(4))
	for _, u := range s.wait(t, 2) {
		if u.Result != UpdateApplied || u.Version != 4 {
			t.Errorf("update after resuming: %+v, want version 4 applied", u)
		}
	}
	r.do(func() {
		for _, read := range []func() (int, error){r.readFile, r.readDir} {
			if v, err := read(); v != 4 || err != nil {
				t.Errorf("after resuming, the reader reads version %d (%v), want 4", v, err)
			}
		}
	})
	for _, p := range []string{s.fileCopy, s.dirCopy} {
		if n := mountsHere(t, p); n != 2 {
			t.Errorf("%d mounts at %s after resuming, want 2", n, p)
		}
	}
}

// waitRetired scans, bounded, until f shows want retired copies.
func waitRetired(t *testing.T, f *Follower, want int) {
	t.Helper()
	var st LiveStatus
	for range 100 {
		f.scan()
		if st = f.Status(); st.RetiredCopies == want {
			return
		}
		time.Sleep(50 * time.Millisecond) // a replaced version stays retireGrace at least
	}
	t.Errorf("status %+v, want %d retired copies", st, want)
}

// gatedLayers holds each putLayer until the test lets it go.
type gatedLayers struct {
	layerOps
	entered, release chan struct{}
}

func (g gatedLayers) putLayer(base, baseRoot, version string, userns int) error {
	select {
	case g.entered <- struct{}{}:
	default: // told already
	}
	<-g.release
	return g.layerOps.putLayer(base, baseRoot, version, userns)
}

// testFollowCloseSaves: the agent closes while its worker puts the file's new layer; the state
// file it leaves names that version (its successor numbers after it), and the directory's
// update, given up by Close, is not recorded as done (its successor applies it).
func testFollowCloseSaves(t *testing.T) {
	s := newLiveSetup(t, bigBudget, payload(0))
	g := gatedLayers{layerOps: s.f.ops, entered: make(chan struct{}, 1), release: make(chan struct{})}
	s.f.ops = g // before Arm: no update has begun
	s.f.Arm("ctr1", 0)
	s.k.WriteAtomic(s.vol, payload(1))
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no update began in 20s")
	}
	closed := make(chan struct{})
	go func() { defer close(closed); s.f.Close() }()
	for i := 0; i < 2000 && s.f.ctx.Err() == nil; i++ {
		time.Sleep(time.Millisecond) // until Close has begun
	}
	close(g.release)
	<-closed
	b, err := os.ReadFile(s.statePath)
	subpathtest.Must(t, err)
	var st stateFile
	subpathtest.Must(t, json.Unmarshal(b, &st))
	want := map[string]statePath{
		s.fileCopy: {Version: 1, Current: s.fileCopy + ".v1"},
		s.dirCopy:  {Version: 0, Data: s.copies[1].Data},
	}
	for _, sp := range st.Paths {
		w := want[sp.Path]
		if sp.Version != w.Version || sp.Current != w.Current || (w.Data != "" && sp.Data != w.Data) {
			t.Errorf("state of %s after Close: version %d %q, data %q; want version %d %q, data %q", sp.Path, sp.Version, sp.Current, sp.Data, w.Version, w.Current, w.Data)
		}
		delete(want, sp.Path)
	}
	if len(want) != 0 {
		t.Errorf("state file after Close lacks %v", want)
	}
}
