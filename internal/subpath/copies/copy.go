package copies

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/subpath"
)

// Budget bounds the copies (configs.SubPathCopies).
type Budget struct {
	PodBytes, PodEntries   int64
	NodeBytes, NodeEntries int64
}

// PageSize is what one entry of a copy costs at least.
const PageSize = 4096

// EntryCost is what one entry of a copy is charged: its content rounded up to pages, and at
// least one page (an inode, a directory block, a symlink).
func EntryCost(size int64) int64 {
	if size <= PageSize {
		return PageSize
	}
	return (size + PageSize - 1) / PageSize * PageSize
}

// Copy is one container's private copy of what an atomic-writer subPath names.
type Copy struct {
	Target  subpath.Target
	Kind    string // configMap, secret, downwardAPI, projected
	SubPath string // the key
	Path    string // the copy: a file or directory below the copy dir
	Bytes   int64  // what it was charged (entries rounded up to pages)
	Entries int64
	// VolumeDir is the volume's directory and Data what its ..data named when the copy was
	// made (read before the copy: a later value means newer content), for live updates.
	VolumeDir, Data string
	// Live says the copy follows updates of its volume (Follower); set by the engine. Idmap
	// says its layers are idmapped with the container's user namespace, as the runtime
	// idmaps the container's bind of it.
	Live, Idmap bool
}

// Usage is what copies were charged.
type Usage struct{ Bytes, Entries int64 }

// Copies makes and removes the copies of containers below Dir:
// Dir/<pod UID>/<container ID>/<volume>/<index>, where Dir/<pod UID> is the pod's own tmpfs
// (tmpfs.go).
type Copies struct {
	Dir    string
	Budget Budget
	r      *subpath.Repairer
	tree   treeCopier // the tree copier (system.go)

	mu       sync.Mutex
	prepared bool
	// pods is what each pod's copies were charged; a pod not in it is counted from Dir on
	// first use (after a restart or a reload, the copies of running containers stay).
	pods map[string]*Usage
	// ctrs is the pod and charge of each container copied since this Copies was made.
	ctrs map[string]ctrCopies
	// tmpfs is a descriptor of each pod's tmpfs root, extra what it held beyond the pod's
	// charge when last measured (pages of copies removed or replaced but still open),
	// detached the descriptors of pods' tmpfs mounts detached while something still held
	// them, and detachedUse what those held when last measured.
	tmpfs       map[string]*os.File
	extra       map[string]Usage
	detached    []*os.File
	detachedUse Usage
}

type ctrCopies struct {
	pod string
	Usage
}

// prepareLocked makes Dir a tmpfs on first use, so that a node without subPaths never gets
// one, and counts the pods' copies already there (a restart, a reload): the node's bound
// counts every pod. Callers hold c.mu.
func (c *Copies) prepareLocked() error {
	if c.prepared {
		return nil
	}
	if err := PrepareCopyDir(c.Dir, c.Budget.NodeBytes, c.Budget.NodeEntries); err != nil {
		return err
	}
	c.prepared = true
	pods, _ := os.ReadDir(c.Dir)
	for _, p := range pods {
		c.podUsage(p.Name())
		if root, err := tmpfsRoot(filepath.Join(c.Dir, p.Name())); err == nil && root {
			if fd, err := openTmpfs(filepath.Join(c.Dir, p.Name())); err == nil {
				c.tmpfs[p.Name()] = fd
			}
		}
	}
	return nil
}

// preparePodLocked makes the pod's directory its tmpfs on its first copy (mountPodTmpfs),
// sized to its budget, and measures what every pod's tmpfs holds beyond its charge (measure).
// Callers hold c.mu.
func (c *Copies) preparePodLocked(pod string) error {
	if err := c.prepareLocked(); err != nil {
		return err
	}
	if _, ok := c.tmpfs[pod]; !ok {
		fd, err := mountPodTmpfs(filepath.Join(c.Dir, pod), c.Budget.PodBytes, PodInodes(c.Budget.PodEntries))
		if err != nil {
			return err
		}
		c.tmpfs[pod] = fd
	}
	c.measureLocked()
	return nil
}

// measureLocked reads what each pod's tmpfs holds beyond the pod's charge, and what the
// detached ones still hold (forgetting those that hold nothing any more). Once per copy,
// not per entry: a copy's own entries are charged before they are written. Callers hold c.mu.
func (c *Copies) measureLocked() {
	clear(c.extra)
	for pod, fd := range c.tmpfs {
		use, err := tmpfsUse(fd)
		if u := c.podUsage(pod); err == nil && use.Bytes > u.Bytes {
			c.extra[pod] = Usage{Bytes: use.Bytes - u.Bytes}
		}
	}
	c.detachedUse = Usage{}
	kept := c.detached[:0]
	for _, fd := range c.detached {
		use, err := tmpfsUse(fd)
		if err != nil || use.Bytes == 0 && use.Entries <= 1 { // the root alone: nothing held
			fd.Close()
			continue
		}
		c.detachedUse.Bytes += use.Bytes
		c.detachedUse.Entries += use.Entries
		kept = append(kept, fd)
	}
	c.detached = kept
}

// nodeUsageLocked is what the node's copies take: every pod's charge, what pods' tmpfs
// mounts hold beyond it, and what detached ones still hold. Callers hold c.mu.
func (c *Copies) nodeUsageLocked() Usage {
	n := c.detachedUse
	for pod, u := range c.pods {
		n.Bytes += u.Bytes + c.extra[pod].Bytes
		n.Entries += u.Entries
	}
	return n
}

// removePodIfEmptyLocked detaches the pod's tmpfs and removes its directory once it holds no
// container's copies. What a process still holds of it stays, bounded by the pod's size, until
// it lets go, and counts against the node until then (measureLocked). Callers hold c.mu.
func (c *Copies) removePodIfEmptyLocked(pod string) error {
	dir := filepath.Join(c.Dir, pod)
	if names, err := os.ReadDir(dir); err != nil || len(names) > 0 {
		return nil
	}
	fd, ok := c.tmpfs[pod]
	delete(c.tmpfs, pod)
	delete(c.extra, pod)
	if root, err := tmpfsRoot(dir); err == nil && root {
		if !ok {
			fd, _ = openTmpfs(dir)
		}
	} else if ok {
		fd.Close() // not the pod's tmpfs any more: detached by someone else
		fd = nil
	}
	if fd != nil {
		c.detached = append(c.detached, fd)
	}
	err := detachPodTmpfs(dir)
	c.measureLocked()
	return err
}

// New returns the copier for dir, which becomes a tmpfs of budget's node size on first use
// (PrepareCopyDir), of the subPaths below r's kubelet root dir.
func New(r *subpath.Repairer, dir string, budget Budget) *Copies {
	return &Copies{Dir: dir, Budget: budget, r: r, tree: system{}, pods: map[string]*Usage{}, ctrs: map[string]ctrCopies{},
		tmpfs: map[string]*os.File{}, extra: map[string]Usage{}}
}

// PodTmpfs is the root of the pod's tmpfs that holds the copy (or version) at path below Dir:
// Dir/<pod UID>.
func (c *Copies) PodTmpfs(path string) string {
	rel, err := filepath.Rel(c.Dir, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return c.Dir
	}
	pod, _, _ := strings.Cut(rel, "/")
	return filepath.Join(c.Dir, pod)
}

// KubeletRoot is the kubelet root dir of the subPaths it copies.
func (c *Copies) KubeletRoot() string { return c.r.Root() }

// containerID is what a runtime's container ID may look like to name a directory. Compiled on
// first use: at package init it cost every start of the binary (the hook's two processes per
// container among them) about 0.3 ms, the {0,127} repetition being expanded.
var containerID = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
})

// CopySources makes container id's copies of the subPath targets among sources that
// kubelet's layout shows to be in atomic-writer volumes. It returns them, the other subPath
// targets (for RepairSources), and a Fallback for each atomic-writer subPath it could not
// copy, which keeps kubelet's bind. It stops when ctx ends; a copy given up leaves nothing.
func (c *Copies) CopySources(ctx context.Context, id string, sources []string) ([]Copy, []string, []subpath.Fallback) {
	var copies []Copy
	var rest []string
	var fallbacks []subpath.Fallback
	for _, src := range sources {
		t, ok := subpath.ParseTarget(c.r.Root(), src)
		if !ok {
			continue
		}
		cp, atomic, err := c.copy(ctx, id, t)
		switch {
		case !atomic:
			rest = append(rest, src)
		case err != nil:
			fallbacks = append(fallbacks, subpath.NewFallback(t, err))
		default:
			copies = append(copies, cp)
		}
	}
	return copies, rest, fallbacks
}

// Copyable returns the targets of sources that CopySources would copy (subPaths of
// atomic-writer volumes), copying nothing: for a container whose copies could not be bound.
func (c *Copies) Copyable(sources []string) []subpath.Target {
	var out []subpath.Target
	for _, src := range sources {
		t, ok := subpath.ParseTarget(c.r.Root(), src)
		if !ok {
			continue
		}
		l, atomic, _ := c.locate(t)
		if l != nil {
			l.Close()
		}
		if atomic {
			out = append(out, t)
		}
	}
	return out
}

// locate finds t's volume. atomic says t is a subPath of an atomic-writer volume, the only
// ones copied (else it is left to RepairSources); err is why one could not be located.
func (c *Copies) locate(t subpath.Target) (l *subpath.Located, atomic bool, err error) {
	l, err = c.r.Locate(t)
	switch {
	case errors.Is(err, subpath.ErrUnknownVolume), errors.Is(err, subpath.ErrNotMounted):
		return nil, false, nil
	case err != nil:
		return nil, true, err
	}
	return l, true, nil
}

// copyAttempts: an update that removes the timestamp directory while a directory is copied
// makes the copy fail (ENOENT); the next attempt resolves ..data again.
const copyAttempts = 3

// copy makes container id's copy of target t. atomic says t is a subPath of an atomic-writer
// volume (else nothing was done: it is for RepairSources).
func (c *Copies) copy(ctx context.Context, id string, t subpath.Target) (Copy, bool, error) {
	cp, atomic, err := c.copyAttempts(ctx, id, t)
	if e := (*subpath.Error)(nil); errors.As(err, &e) {
		e.Copy = true
	}
	return cp, atomic, err
}

func (c *Copies) copyAttempts(ctx context.Context, id string, t subpath.Target) (Copy, bool, error) {
	return c.CopyTo(ctx, id, t, filepath.Join(c.Dir, t.PodUID, id, t.Volume, strconv.Itoa(t.Index)))
}

// CopyTo makes container id's copy of target t at dst (a live update's new version names its
// own).
func (c *Copies) CopyTo(ctx context.Context, id string, t subpath.Target, dst string) (Copy, bool, error) {
	err := subpath.ErrChanged
	for range copyAttempts {
		l, atomic, lerr := c.locate(t)
		if !atomic || lerr != nil {
			return Copy{}, atomic, lerr
		}
		cp := Copy{Target: t, Kind: l.Kind, SubPath: l.Resolution.SubPath, Path: dst, VolumeDir: l.VolumePath, Data: readData(l.VolumeDir)}
		var used Usage
		used, err = c.copyLocated(ctx, id, l, dst)
		what := l.What
		l.Close()
		switch {
		case err == nil:
			cp.Bytes, cp.Entries = used.Bytes, used.Entries
			return cp, true, nil
		case errors.Is(err, subpath.ErrOverBudget):
			return Copy{}, true, &subpath.Error{Target: t, Reason: fmt.Sprintf("%s cannot be copied within the pod's budget (subPathCopies.podBytes %d, podEntries %d)", what, c.Budget.PodBytes, c.Budget.PodEntries), Err: err}
		case errors.Is(err, subpath.ErrPoolFull):
			return Copy{}, true, &subpath.Error{Target: t, Reason: fmt.Sprintf("%s cannot be copied within the node's bound on copies (subPathCopies.nodeBytes %d, nodeEntries %d)", what, c.Budget.NodeBytes, c.Budget.NodeEntries), Err: err}
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, subpath.ErrChanged):
			return Copy{}, true, &subpath.Error{Target: t, Reason: "cannot copy " + what, Err: err}
		}
	}
	return Copy{}, true, &subpath.Error{Target: t, Reason: fmt.Sprintf("the volume changed under each of %d copies", copyAttempts), Err: err}
}

// copyLocated copies what l located to dst, charging the pod, and leaves nothing when it
// fails: dst, the directories made for it and the charge are removed.
func (c *Copies) copyLocated(ctx context.Context, id string, l *subpath.Located, dst string) (Usage, error) {
	t := l.Target
	if !containerID().MatchString(id) {
		return Usage{}, fmt.Errorf("container ID %q cannot name a copy directory", id)
	}
	if err := ctx.Err(); err != nil {
		return Usage{}, fmt.Errorf("copy given up: %w", err)
	}
	c.mu.Lock()
	err := c.preparePodLocked(t.PodUID)
	if err != nil {
		err = fmt.Errorf("no directory for private copies: %w", err)
	} else {
		err = os.MkdirAll(filepath.Dir(dst), 0o700)
	}
	c.mu.Unlock()
	if err != nil {
		return Usage{}, err
	}
	ch := &charger{c: c, pod: t.PodUID}
	err = c.tree.CopyTree(ctx, l.VolumeDir, l.Resolution.Rel, l.Object, dst, ch.charge)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("copy given up: %w", ctx.Err()) // the caller stopped waiting: nobody binds it
	}
	if err != nil {
		os.RemoveAll(dst) // dst is this copy's alone: no lock, which other pods' copies take
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			err = c.podFullLocked(t.PodUID, err)
		}
		c.removeEmpty(filepath.Dir(dst), filepath.Join(c.Dir, t.PodUID))
		c.uncharge(t.PodUID, ch.used)
		_ = c.removePodIfEmptyLocked(t.PodUID)
		return Usage{}, err
	}
	cc := c.ctrs[id]
	cc.pod = t.PodUID
	cc.Bytes += ch.used.Bytes
	cc.Entries += ch.used.Entries
	c.ctrs[id] = cc
	return ch.used, nil
}

// podFullLocked is the error of a copy that met a full pod tmpfs (ENOSPC): over the pod's
// budget, saying what holds it. Callers hold c.mu.
func (c *Copies) podFullLocked(pod string, err error) error {
	fd, ok := c.tmpfs[pod]
	if !ok {
		return err
	}
	use, serr := tmpfsUse(fd)
	if serr != nil {
		return err
	}
	u := c.podUsage(pod)
	return fmt.Errorf("%w: the pod's copy tmpfs is full (%d bytes in %d inodes, of which %d bytes are charged: the rest are copies removed or replaced but still held open): %w",
		subpath.ErrOverBudget, use.Bytes, use.Entries, u.Bytes, err)
}

// readData is what the ..data link of the volume directory dir names now ("" if none).
func readData(dir *subpath.Node) string {
	var buf [256]byte
	n, err := unix.Readlinkat(dir.FD(), "..data", buf[:])
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// Release returns used, what one of container id's copies in pod was charged, once the copy
// is gone (a live update's old version).
func (c *Copies) Release(id, pod string, used Usage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uncharge(pod, used)
	if cc, ok := c.ctrs[id]; ok {
		cc.Bytes = max(cc.Bytes-used.Bytes, 0)
		cc.Entries = max(cc.Entries-used.Entries, 0)
		c.ctrs[id] = cc
	}
}

// removeCopyDir removes a container's copy directory; a live copy's mounts (Follower) are
// detached first, which a plain removal meets as EBUSY (a mount point), EROFS (an entry below
// a read-only layer) or ENOTEMPTY (the directory above it), whichever it meets first.
func removeCopyDir(dir string) error {
	err := os.RemoveAll(dir)
	if err != nil {
		if err = DetachBelow(dir); err == nil {
			err = os.RemoveAll(dir)
		}
	}
	return err
}

// DetachBelow unmounts, lazily and deepest first, every mount at or below dir in this mount
// namespace, so that the copies there can be removed (a mount point cannot be).
func DetachBelow(dir string) error {
	dir = filepath.Clean(dir)
	for range 64 {
		points, err := mountsBelow(dir)
		if err != nil || len(points) == 0 {
			return err
		}
		for _, p := range points {
			if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("detach the mount on %s: %w", p, err)
			}
		}
	}
	return fmt.Errorf("mounts below %s keep coming back", dir)
}

// mountsBelow lists the mount points at or below dir, deepest first, once each.
func mountsBelow(dir string) ([]string, error) {
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	points := make([]string, 0, len(ms))
	for _, m := range ms {
		points = append(points, m.Mountpoint)
	}
	slices.SortFunc(points, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return slices.Compact(points), nil
}

// removeEmpty removes dir and its parents up to and including top while they are empty.
// Callers hold c.mu.
func (c *Copies) removeEmpty(dir, top string) {
	for {
		if os.Remove(dir) != nil || dir == top {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// charger charges one copy's entries to its pod.
type charger struct {
	c    *Copies
	pod  string
	used Usage
}

// charge charges one entry of cost bytes, or returns subpath.ErrOverBudget.
func (ch *charger) charge(cost int64) error {
	c := ch.c
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.podUsage(ch.pod)
	held := c.extra[ch.pod].Bytes
	if u.Bytes+held+cost > c.Budget.PodBytes || u.Entries+1 > c.Budget.PodEntries {
		return fmt.Errorf("%w: %d bytes in %d entries charged already, %d bytes more held open by copies removed or replaced", subpath.ErrOverBudget, u.Bytes, u.Entries, held)
	}
	if n := c.nodeUsageLocked(); n.Bytes+cost > c.Budget.NodeBytes || n.Entries+1 > c.Budget.NodeEntries {
		return fmt.Errorf("%w: %d bytes in %d entries taken already", subpath.ErrPoolFull, n.Bytes, n.Entries)
	}
	u.Bytes += cost
	u.Entries++
	ch.used.Bytes += cost
	ch.used.Entries++
	return nil
}

// podUsage is what pod's copies were charged, counted from Dir when not known. Callers hold
// c.mu.
func (c *Copies) podUsage(pod string) *Usage {
	if u := c.pods[pod]; u != nil {
		return u
	}
	u := &Usage{}
	root := filepath.Join(c.Dir, pod)
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		// Only the copies are charged: <container>/<volume>/<index> and what is below it.
		if rel, _ := filepath.Rel(root, p); err != nil || strings.Count(rel, "/") < 2 {
			return nil
		}
		size := int64(0)
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				size = fi.Size()
			}
		}
		u.Bytes += EntryCost(size)
		u.Entries++
		return nil
	})
	c.pods[pod] = u
	return u
}

// recountLocked counts pod's charge again from Dir (its copies removed without their charge
// known), so that the node's bound keeps counting what is left. Callers hold c.mu.
func (c *Copies) recountLocked(pod string) {
	delete(c.pods, pod)
	if u := c.podUsage(pod); u.Bytes == 0 && u.Entries == 0 {
		delete(c.pods, pod)
	}
}

// uncharge returns used to pod's budget. Callers hold c.mu.
func (c *Copies) uncharge(pod string, used Usage) {
	u := c.pods[pod]
	if u == nil {
		return
	}
	u.Bytes = max(u.Bytes-used.Bytes, 0)
	u.Entries = max(u.Entries-used.Entries, 0)
	if u.Bytes == 0 && u.Entries == 0 {
		delete(c.pods, pod)
	}
}

// Remove removes container id's copies and returns their charge to the pod. The
// container's mounts keep what they bound.
func (c *Copies) Remove(id string) error {
	if !containerID().MatchString(id) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.ctrs[id]; ok {
		delete(c.ctrs, id)
		err := removeCopyDir(filepath.Join(c.Dir, cc.pod, id))
		c.uncharge(cc.pod, cc.Usage)
		return errors.Join(err, c.removePodIfEmptyLocked(cc.pod))
	}
	// Copied before this Copies was made (a restart, a reload): find its pod.
	dirs, _ := filepath.Glob(filepath.Join(c.Dir, "*", id))
	var errs []error
	for _, d := range dirs {
		errs = append(errs, removeCopyDir(d))
		pod := filepath.Base(filepath.Dir(d))
		c.recountLocked(pod)
		errs = append(errs, c.removePodIfEmptyLocked(pod))
	}
	return errors.Join(errs...)
}

// Containers lists the containers that have copies below Dir.
func (c *Copies) Containers() ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pods, err := os.ReadDir(c.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var ids []string
	var errs []error
	for _, p := range pods {
		ctrs, err := os.ReadDir(filepath.Join(c.Dir, p.Name()))
		errs = append(errs, err)
		for _, e := range ctrs {
			ids = append(ids, e.Name())
		}
	}
	return ids, errors.Join(append(errs, err)...)
}

// Sweep removes the copies of every container not in keep (containers removed while the
// plugin was away) and returns their IDs.
func (c *Copies) Sweep(keep map[string]bool) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pods, err := os.ReadDir(c.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, p := range pods {
		podDir := filepath.Join(c.Dir, p.Name())
		ctrs, err := os.ReadDir(podDir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ctrs {
			if keep[e.Name()] {
				continue
			}
			if err := removeCopyDir(filepath.Join(podDir, e.Name())); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(c.ctrs, e.Name())
			removed = append(removed, e.Name())
		}
		c.recountLocked(p.Name())
		errs = append(errs, c.removePodIfEmptyLocked(p.Name()))
	}
	return removed, errors.Join(errs...)
}
