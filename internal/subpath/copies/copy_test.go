package copies

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/idmap"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/subpathtest"

	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestCopiesInNamespace runs the copies against kubelet's layout with real mounts, in a
// private mount namespace.
func TestCopiesInNamespace(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	t.Run("kubelet's layout decides what is copied", testLayoutDecides)
	t.Run("a copy can be idmapped where the kernel idmaps tmpfs (Linux 6.3)", testCopyIdmap)
	t.Run("budget per pod", testPodBudget)
	t.Run("entries cost a page", testEntriesCost)
	t.Run("budget counted again by a new Copies", testBudgetAfterReload)
	t.Run("a copy given up leaves nothing", testGivenUp)
	t.Run("FIFOs are never opened", testFIFO)
	t.Run("copies pinned after their removal count against the pod's tmpfs", testPinnedCopies)
}

// bigBudget lets every test copy what it makes unless it tests the budget.
var bigBudget = Budget{PodBytes: 64 << 20, PodEntries: 100_000, NodeBytes: 256 << 20, NodeEntries: 200_000}

func newCopies(t *testing.T, k *subpathtest.Kubelet, b Budget) *Copies {
	t.Helper()
	return New(subpath.NewRepairer(k.Root), copyDir(t), b)
}

// copyDir is a directory for copies; its tmpfs is unmounted when the test ends.
func copyDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "copies")
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }) // runs before TempDir's removal
	return dir
}

// entriesBelow counts what lies below dir (dir itself not counted; a missing dir holds 0).
func entriesBelow(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err == nil && p != dir {
			n++
		}
		return err
	})
	subpathtest.Must(t, err)
	return n
}

func reasons(fs []subpath.Fallback) []string {
	var rs []string
	for _, f := range fs {
		rs = append(rs, f.Reason)
	}
	return rs
}

// testLayoutDecides is the layout rule at the level of the package: with kubelet's
// real layout, a hostPath subPath (a file and a directory; kubelet keeps no directory for
// the volume) and a CSI PVC subPath (its directory is named after the PV:
// volumes/kubernetes.io~csi/pvc-.../mount) are neither copied nor an error; before the fix
// both were "not repaired: cannot find the volume's directory" and refused the container.
// Only the configMap key is copied. A stale hostPath bind cannot be repaired (nothing proves
// where it came from): it is a Fallback, not an error.
func testLayoutDecides(t *testing.T) {
	k := subpathtest.NewKubelet(t)
	cm := k.Volume(subpathtest.ConfigMap, "cfg", false)
	k.WriteAtomic(cm, map[string]subpathtest.Entry{"app.conf": subpathtest.File("v1")})
	_, host := subpathtest.Outside(t)
	subpathtest.Must(t, os.Mkdir(filepath.Join(host, "d"), 0o755))
	pv := filepath.Join(k.Volume(subpathtest.CSI, "pvc-0f5a4c1e", false), "mount")
	subpathtest.Must(t, os.MkdirAll(filepath.Join(pv, "sub"), 0o755))
	scratch := k.Volume(subpathtest.EmptyDir, "scratch", false)
	subpathtest.Must(t, os.WriteFile(filepath.Join(scratch, "f"), []byte("e"), 0o644))
	cmT := subpathtest.Bind(k, subpath.ParseTarget, cm, "cfg", "app", 0, "app.conf")
	hostFile := subpathtest.Bind(k, subpath.ParseTarget, host, "host", "app", 1, "secret.txt")
	hostDir := subpathtest.Bind(k, subpath.ParseTarget, host, "host", "app", 2, "d")
	pvc := subpathtest.Bind(k, subpath.ParseTarget, pv, "data", "app", 3, "sub")
	empty := subpathtest.Bind(k, subpath.ParseTarget, scratch, "scratch", "app", 4, "f")
	c := newCopies(t, k, bigBudget)

	sources := []string{cmT.Path, hostFile.Path, hostDir.Path, pvc.Path, empty.Path, "/not/a/subpath"}
	// Copyable names what CopySources copies, and copies nothing.
	if got := c.Copyable(sources); !slices.Equal(got, []subpath.Target{cmT}) {
		t.Errorf("Copyable = %+v, want the configMap key's target alone", got)
	}
	if entries, err := os.ReadDir(c.Dir); err == nil && len(entries) != 0 || err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Copyable left %v in %s (%v)", entries, c.Dir, err)
	}
	copies, rest, fallbacks := c.CopySources(context.Background(), "ctr", sources)
	if len(copies) != 1 || copies[0].Target != cmT || subpathtest.Show(t, copies[0].Path) != "v1" {
		t.Errorf("copies = %+v, want one of the configMap key reading v1", copies)
	}
	// The node pool is a tmpfs bounded in bytes and in inodes (size= alone bounds no inode).
	var sfs unix.Statfs_t
	subpathtest.Must(t, unix.Statfs(c.Dir, &sfs))
	if sfs.Type != unix.TMPFS_MAGIC || int64(sfs.Blocks)*sfs.Bsize != bigBudget.NodeBytes || int64(sfs.Files) != bigBudget.NodeEntries {
		t.Errorf("the copy dir is fs %#x of %d bytes and %d inodes, want a tmpfs of %d and %d",
			sfs.Type, int64(sfs.Blocks)*sfs.Bsize, sfs.Files, bigBudget.NodeBytes, bigBudget.NodeEntries)
	}
	if want := []string{hostFile.Path, hostDir.Path, pvc.Path, empty.Path}; !slices.Equal(rest, want) {
		t.Errorf("left for repair %q, want %q", rest, want)
	}
	if len(fallbacks) != 0 {
		t.Errorf("fallbacks %v, want none", fallbacks)
	}
	repairs, fallbacks, err := c.r.RepairSources(rest)
	if len(repairs) != 0 || len(fallbacks) != 0 || err != nil {
		t.Errorf("RepairSources of fresh binds = %v, %v, %v; want nothing to do", repairs, fallbacks, err)
	}

	// The hostPath file is replaced: kubelet's bind is stale and stays so.
	subpathtest.Must(t, os.Remove(filepath.Join(host, "secret.txt")))
	subpathtest.Must(t, os.WriteFile(filepath.Join(host, "secret.txt"), []byte("new"), 0o644))
	repairs, fallbacks, err = c.r.RepairSources(rest)
	if len(repairs) != 0 || err != nil || len(fallbacks) != 1 || fallbacks[0].Target != hostFile || fallbacks[0].Reason != subpath.ReasonUnknownVolume {
		t.Errorf("RepairSources of a stale hostPath bind = %v, %v, %v; want one %s fallback for %s", repairs, fallbacks, err, subpath.ReasonUnknownVolume, hostFile.Path)
	}
	if stale, err := c.r.Stale(hostFile); !stale || err != nil {
		t.Errorf("the stale hostPath bind was touched: Stale = %v, %v", stale, err)
	}
}

// projectedPod makes a pod (uid) with a projected volume of files keys of size bytes each,
// and n binds of its ..data directory (subPath: ..data), as kubelet allows.
func projectedPod(t *testing.T, k *subpathtest.Kubelet, uid string, keys, size, n int) []string {
	t.Helper()
	k.UID = uid
	vol := k.Volume(subpathtest.Projected, "all", false)
	files := map[string]subpathtest.Entry{}
	for i := range keys {
		files[fmt.Sprintf("cm%02d", i)] = subpathtest.File(strings.Repeat("x", size))
	}
	k.WriteAtomic(vol, files)
	var sources []string
	for i := range n {
		sources = append(sources, subpathtest.Bind(k, subpath.ParseTarget, vol, "all", "app", i, "..data").Path)
	}
	return sources
}

// testPodBudget: a pod whose subPaths pass its budget gets the copies that fit and keeps
// kubelet's bind for the others (over_budget), leaving nothing of the copy that did not fit;
// another pod still gets its copy; Remove returns the charge.
func testPodBudget(t *testing.T) {
	k := subpathtest.NewKubelet(t)
	b := Budget{PodBytes: 8 << 20, PodEntries: 1000, NodeBytes: 64 << 20, NodeEntries: 10_000}
	c := newCopies(t, k, b)
	// 4 keys of 1 MB: one copy costs 4 MiB and a page for the directory, so one fits.
	attack := projectedPod(t, k, "uid-attacker", 4, 1_048_000, 4)
	copies, _, fallbacks := c.CopySources(context.Background(), "attacker", attack)
	if len(copies) != 1 || !slices.Equal(reasons(fallbacks), []string{subpath.ReasonOverBudget, subpath.ReasonOverBudget, subpath.ReasonOverBudget}) {
		t.Fatalf("attacker: %d copies, fallbacks %v; want 1 copy and 3 over_budget", len(copies), reasons(fallbacks))
	}
	if want := int64(4<<20 + PageSize); copies[0].Bytes != want || copies[0].Entries != 5 {
		t.Errorf("the copy was charged %d bytes in %d entries, want %d in 5", copies[0].Bytes, copies[0].Entries, want)
	}
	if !strings.Contains(fallbacks[0].Error(), "podBytes 8388608") {
		t.Errorf("fallback %q does not name the budget", fallbacks[0].Error())
	}
	if n := entriesBelow(t, filepath.Join(c.Dir, "uid-attacker", "attacker")); n != 1+1+4 {
		t.Errorf("%d entries below the attacker's copies, want 6 (the volume's directory, the copy and its 4 files): the copies that did not fit left something", n)
	}

	k.UID = "uid-victim"
	cm := k.Volume(subpathtest.ConfigMap, "cfg", false)
	k.WriteAtomic(cm, map[string]subpathtest.Entry{"app.conf": subpathtest.File("victim")})
	victim := subpathtest.Bind(k, subpath.ParseTarget, cm, "cfg", "app", 0, "app.conf")
	copies, _, fallbacks = c.CopySources(context.Background(), "victim", []string{victim.Path})
	if len(copies) != 1 || len(fallbacks) != 0 || subpathtest.Show(t, copies[0].Path) != "victim" {
		t.Errorf("victim: copies %+v, fallbacks %v; want its copy", copies, fallbacks)
	}

	subpathtest.Must(t, c.Remove("attacker"))
	copies, _, fallbacks = c.CopySources(context.Background(), "attacker-2", attack[:1])
	if len(copies) != 1 || len(fallbacks) != 0 {
		t.Errorf("after Remove the attacker pod's budget is not returned: copies %d, fallbacks %v", len(copies), fallbacks)
	}
}

// emptyKeys makes a configMap volume "many" of n empty keys and binds its ..data directory
// (subPath: ..data).
func emptyKeys(k *subpathtest.Kubelet, n int) subpath.Target {
	vol := k.Volume(subpathtest.ConfigMap, "many", false)
	files := make(map[string]subpathtest.Entry, n)
	for i := range n {
		files[fmt.Sprintf("k%05d", i)] = subpathtest.File("")
	}
	k.WriteAtomic(vol, files)
	return subpathtest.Bind(k, subpath.ParseTarget, vol, "many", "app", 0, "..data")
}

// testEntriesCost: 100 empty keys cost 100 pages and 100 entries: past podEntries, the copy
// falls back although it holds no byte.
func testEntriesCost(t *testing.T) {
	k := subpathtest.NewKubelet(t)
	src := emptyKeys(k, 100)
	c := newCopies(t, k, Budget{PodBytes: 1 << 20, PodEntries: 50, NodeBytes: 8 << 20, NodeEntries: 1000})
	copies, _, fallbacks := c.CopySources(context.Background(), "ctr", []string{src.Path})
	if len(copies) != 0 || !slices.Equal(reasons(fallbacks), []string{subpath.ReasonOverBudget}) {
		t.Errorf("100 empty keys, podEntries 50: copies %d, fallbacks %v; want over_budget", len(copies), fallbacks)
	}
	if n := entriesBelow(t, c.Dir); n != 0 {
		t.Errorf("%d entries left below %s, want 0", n, c.Dir)
	}
	c = newCopies(t, k, Budget{PodBytes: 200 * PageSize, PodEntries: 1000, NodeBytes: 8 << 20, NodeEntries: 1000})
	copies, _, fallbacks = c.CopySources(context.Background(), "ctr", []string{src.Path})
	if len(copies) != 1 || len(fallbacks) != 0 || copies[0].Bytes != 101*PageSize {
		t.Errorf("100 empty keys: copies %+v, fallbacks %v; want one copy charged 101 pages", copies, fallbacks)
	}
}

// testBudgetAfterReload: a Copies made for the same directory (a reload, a restart) counts
// what the pods' copies hold already.
func testBudgetAfterReload(t *testing.T) {
	k := subpathtest.NewKubelet(t)
	b := Budget{PodBytes: 8 << 20, PodEntries: 1000, NodeBytes: 64 << 20, NodeEntries: 10_000}
	c := newCopies(t, k, b)
	srcs := projectedPod(t, k, "uid-a", 4, 1_048_000, 2)
	if copies, _, fallbacks := c.CopySources(context.Background(), "one", srcs[:1]); len(copies) != 1 || len(fallbacks) != 0 {
		t.Fatalf("first copy: %d, %v", len(copies), fallbacks)
	}
	again := New(subpath.NewRepairer(k.Root), c.Dir, b)
	if copies, _, fallbacks := again.CopySources(context.Background(), "two", srcs[1:]); len(copies) != 0 || !slices.Equal(reasons(fallbacks), []string{subpath.ReasonOverBudget}) {
		t.Errorf("after a reload the pod's earlier copy is not counted: copies %d, fallbacks %v", len(copies), reasons(fallbacks))
	}
	subpathtest.Must(t, again.Remove("one")) // copied before this Copies was made: found by its ID
	if _, err := os.Stat(filepath.Join(c.Dir, "uid-a")); !os.IsNotExist(err) {
		t.Errorf("Remove of a container copied before the reload left its pod's directory: %v", err)
	}
}

// cancellingTree cancels the copy's context once it has charged after entries.
type cancellingTree struct {
	system
	cancel  context.CancelFunc
	after   int
	charged int
}

func (h *cancellingTree) CopyTree(ctx context.Context, dir *subpath.Node, rel string, want *subpath.Node, dst string, charge func(int64) error) error {
	return h.system.CopyTree(ctx, dir, rel, want, dst, func(cost int64) error {
		if h.charged++; h.charged == h.after {
			h.cancel()
		}
		return charge(cost)
	})
}

// testGivenUp is the given-up rule: a copy whose caller gives up (its bound passed)
// stops at the next entry and removes what it wrote, and returns its charge; before the fix
// it went on writing into the copy directory until the whole volume was copied.
func testGivenUp(t *testing.T) {
	k := subpathtest.NewKubelet(t)
	src := emptyKeys(k, 2000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	host := &cancellingTree{cancel: cancel, after: 500}
	c := New(subpath.NewRepairer(k.Root), copyDir(t), bigBudget)
	c.tree = host
	goroutines := runtime.NumGoroutine()
	copies, rest, fallbacks := c.CopySources(ctx, "ctr", []string{src.Path})
	if len(copies) != 0 || len(rest) != 0 || !slices.Equal(reasons(fallbacks), []string{subpath.ReasonTimeout}) {
		t.Fatalf("a copy given up: copies %d, rest %v, fallbacks %v; want one timeout fallback", len(copies), rest, fallbacks)
	}
	if host.charged != host.after {
		t.Errorf("the copy charged %d entries, want it to stop at the one after the cancel (%d)", host.charged, host.after)
	}
	if n := entriesBelow(t, c.Dir); n != 0 {
		t.Errorf("%d entries left below %s after the copy was given up, want 0", n, c.Dir)
	}
	if u := c.pods[k.UID]; u != nil {
		t.Errorf("the given-up copy's charge stays: %+v", *u)
	}
	if after := runtime.NumGoroutine(); after > goroutines {
		t.Errorf("goroutines %d -> %d", goroutines, after)
	}
}

// testFIFO is the FIFO rule: a FIFO at a subPath, or below a subPath directory, is
// never opened (before the fix open blocked forever): the subPath keeps kubelet's bind.
func testFIFO(t *testing.T) {
	k := subpathtest.NewKubelet(t)
	vol := k.Volume(subpathtest.ConfigMap, "cfg", false)
	ts := k.WriteAtomic(vol, map[string]subpathtest.Entry{"d/x": subpathtest.File("x"), "app.conf": subpathtest.File("a")})
	subpathtest.Must(t, syscall.Mkfifo(filepath.Join(vol, ts, "pipe"), 0o644))
	subpathtest.Must(t, os.Symlink("..data/pipe", filepath.Join(vol, "pipe")))
	subpathtest.Must(t, syscall.Mkfifo(filepath.Join(vol, ts, "d", "pipe"), 0o644))
	atKey := subpathtest.Bind(k, subpath.ParseTarget, vol, "cfg", "app", 0, "pipe")
	inDir := subpathtest.Bind(k, subpath.ParseTarget, vol, "cfg", "app", 1, "d")
	c := newCopies(t, k, bigBudget)
	type result struct {
		copies    []Copy
		fallbacks []subpath.Fallback
	}
	done := make(chan result, 1)
	go func() {
		copies, _, fallbacks := c.CopySources(context.Background(), "ctr", []string{atKey.Path, inDir.Path})
		done <- result{copies, fallbacks}
	}()
	select {
	case r := <-done:
		if len(r.copies) != 0 || !slices.Equal(reasons(r.fallbacks), []string{subpath.ReasonNotRegular, subpath.ReasonNotRegular}) {
			t.Errorf("FIFOs: copies %d, fallbacks %v; want two not_regular", len(r.copies), r.fallbacks)
		}
		for _, f := range r.fallbacks {
			if !errors.Is(f.Err, subpath.ErrNotRegular) || !strings.Contains(f.Error(), "fifo") {
				t.Errorf("fallback %q does not say it met a fifo", f.Error())
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("copying a FIFO subPath blocked") // a bound on a hang, not a timing assertion
	}
	if n := entriesBelow(t, c.Dir); n != 0 {
		t.Errorf("%d entries left below %s, want 0", n, c.Dir)
	}
}

// tmpfsBytes is what the filesystem at dir holds in data pages (statfs), and whether dir is
// the root of a filesystem of its own (not the node's copy tmpfs, nodeDir).
func tmpfsBytes(t *testing.T, dir, nodeDir string) (int64, bool) {
	t.Helper()
	var sfs unix.Statfs_t
	subpathtest.Must(t, unix.Statfs(dir, &sfs))
	// By device, not statfs' fsid: tmpfs reports fsid 0 before Linux 5.13 (Debian's 5.10).
	var st, node unix.Stat_t
	subpathtest.Must(t, unix.Stat(dir, &st))
	subpathtest.Must(t, unix.Stat(nodeDir, &node))
	return int64(sfs.Blocks-sfs.Bfree) * sfs.Bsize, st.Dev != node.Dev
}

// testPinnedCopies: a container of the attacker pod pins each copy it gets (its descriptor
// passed over a unix socket: held by no process's fd table) and restarts 8 times while a
// sidecar keeps the pod alive. The charge is returned at each removal, but the pages stay:
// they are on the pod's own tmpfs, sized to its budget, so what the pod holds, pinned and
// live, never passes its budget, the copies that no longer fit fall back (over_budget, the
// container keeping kubelet's bind), and another pod's copies are unaffected. Once the pod's
// last container goes its tmpfs is detached; what is still pinned counts against the node
// until it is let go.
func testPinnedCopies(t *testing.T) {
	k := subpathtest.NewKubelet(t)
	b := Budget{PodBytes: 4 << 20, PodEntries: 100, NodeBytes: 7 << 20, NodeEntries: 1000}
	c := newCopies(t, k, b)
	k.UID = "uid-attacker"
	cm := k.Volume(subpathtest.ConfigMap, "cfg", false)
	k.WriteAtomic(cm, map[string]subpathtest.Entry{"big": subpathtest.File(strings.Repeat("x", 1<<20)), "small": subpathtest.File("s")})
	sidecar := subpathtest.Bind(k, subpath.ParseTarget, cm, "cfg", "sidecar", 0, "small")
	big := subpathtest.Bind(k, subpath.ParseTarget, cm, "cfg", "app", 0, "big")
	if copies, _, fb := c.CopySources(context.Background(), "sidecar", []string{sidecar.Path}); len(copies) != 1 || len(fb) != 0 {
		t.Fatalf("sidecar: copies %d, fallbacks %v", len(copies), fb)
	}
	podDir := filepath.Join(c.Dir, "uid-attacker")
	var copied, fellBack int
	var releases []func()
	for i := range 8 {
		id := fmt.Sprintf("app-%d", i)
		copies, _, fb := c.CopySources(context.Background(), id, []string{big.Path})
		switch {
		case len(copies) == 1:
			copied++
			releases = append(releases, subpathtest.PinInFlight(t, copies[0].Path))
		case len(fb) == 1 && fb[0].Reason == subpath.ReasonOverBudget:
			fellBack++
			if !strings.Contains(fb[0].Error(), "held open") {
				t.Errorf("restart %d: fallback %q does not say the pod's copies are held open", i, fb[0].Error())
			}
		default:
			t.Fatalf("restart %d: copies %d, fallbacks %v; want a copy or an over_budget fallback", i, len(copies), fb)
		}
		subpathtest.Must(t, c.Remove(id)) // the container restarts: its copy is unlinked, still pinned
		// Only the attacker's copies are on the copy tmpfs yet: before the fix (one tmpfs
		// for the node) statfs shows what the pod holds as well.
		used, own := tmpfsBytes(t, podDir, c.Dir)
		if used > b.PodBytes {
			t.Errorf("restart %d: the attacker pod holds %d bytes, pinned and live, past its podBytes %d", i, used, b.PodBytes)
		}
		if !own && i == 0 {
			t.Errorf("the attacker pod's copies are not on a tmpfs of its own")
		}
	}
	if fellBack == 0 || copied > 3 {
		t.Errorf("8 restarts pinning 1 MiB each: %d copied, %d fell back; want 3 copies (the sidecar's page and three pinned MiB fill the pod's 4 MiB), then fallbacks", copied, fellBack)
	}

	t.Logf("8 restarts pinning 1 MiB each: %d copied, %d fell back", copied, fellBack)
	k.UID = "uid-victim"
	vcm := k.Volume(subpathtest.ConfigMap, "cfg", false)
	k.WriteAtomic(vcm, map[string]subpathtest.Entry{"big": subpathtest.File(strings.Repeat("v", 1<<20))})
	victim := subpathtest.Bind(k, subpath.ParseTarget, vcm, "cfg", "app", 0, "big")
	if copies, _, fb := c.CopySources(context.Background(), "victim", []string{victim.Path}); len(copies) != 1 || len(fb) != 0 {
		t.Errorf("victim pod: copies %d, fallbacks %v; want its copy, whatever the attacker pins", len(copies), fb)
	}

	// The pod's last container goes: its tmpfs is detached and its directory removed; what
	// is still pinned (3 MiB) counts against the node (7 MiB, the victim's copy 1 MiB) until
	// it is let go: a 4 MiB copy of a third pod does not fit, then it does.
	subpathtest.Must(t, c.Remove("sidecar"))
	if _, err := os.Stat(podDir); !os.IsNotExist(err) {
		t.Errorf("the attacker pod's tmpfs directory is still there after its last container went: %v", err)
	}
	if ms, _ := mountsBelow(podDir); len(ms) != 0 {
		t.Errorf("mounts left at the attacker pod's directory: %v", ms)
	}
	k.UID = "uid-third"
	tcm := k.Volume(subpathtest.ConfigMap, "cfg", false)
	k.WriteAtomic(tcm, map[string]subpathtest.Entry{"big": subpathtest.File(strings.Repeat("t", 4<<20))})
	third := subpathtest.Bind(k, subpath.ParseTarget, tcm, "cfg", "app", 0, "big")
	if copies, _, fb := c.CopySources(context.Background(), "third", []string{third.Path}); len(copies) != 0 || !slices.Equal(reasons(fb), []string{subpath.ReasonPoolFull}) {
		t.Errorf("a third pod's 4 MiB copy while 3 MiB of a detached pod tmpfs are pinned: copies %d, fallbacks %v; want pool_full", len(copies), fb)
	}
	for _, release := range releases {
		release()
	}
	if copies, _, fb := c.CopySources(context.Background(), "third", []string{third.Path}); len(copies) != 1 || len(fb) != 0 {
		t.Errorf("a third pod's 4 MiB copy once the pinned copies are let go: copies %d, fallbacks %v; want its copy", len(copies), fb)
	}
}

// testCopyIdmap: a container with a user namespace gets its copy bound idmapped, and the
// engine keeps kubelet's bind instead where the kernel cannot idmap the copy (engine's
// TestSubPathCopiesOfUserNamespacedContainers). What the kernel answers for a real copy:
// idmappable from Linux 6.3, when tmpfs gained idmapped mounts; before, not supported (EINVAL
// from 5.12, ENOSYS before), which is what makes the engine fall back there.
func testCopyIdmap(t *testing.T) {
	k := subpathtest.NewKubelet(t)
	cm := k.Volume(subpathtest.Secret, "tok", false)
	k.WriteAtomic(cm, map[string]subpathtest.Entry{"token": subpathtest.File("s3cr3t")})
	target := subpathtest.Bind(k, subpath.ParseTarget, cm, "tok", "app", 0, "token")
	c := newCopies(t, k, bigBudget)
	cps, _, fbs := c.CopySources(context.Background(), "ctr", []string{target.Path})
	if len(cps) != 1 || len(fbs) != 0 {
		t.Fatalf("copies %+v, fallbacks %v", cps, fbs)
	}
	t.Cleanup(func() { subpathtest.Must(t, c.Remove("ctr")) })
	var uts unix.Utsname
	subpathtest.Must(t, unix.Uname(&uts))
	release := unix.ByteSliceToString(uts.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	err := idmap.Default.Check(cps[0].Path)
	var ns *idmap.NotSupportedError
	switch idmaps := major > 6 || major == 6 && minor >= 3; {
	case idmaps && err != nil:
		t.Errorf("on Linux %s a copy should be idmappable: %v", release, err)
	case !idmaps && (!errors.As(err, &ns) || ns.FSType != "tmpfs"):
		t.Errorf("on Linux %s a copy on tmpfs cannot be idmapped, yet the check answers %v; want a NotSupportedError naming tmpfs", release, err)
	default:
		t.Logf("Linux %s: a copy can be idmapped: %t (%v)", release, idmaps, err)
	}
}
