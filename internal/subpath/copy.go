package subpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Copies of atomic-writer subPaths (kubernetes #127602).
//
// Repair closes the window up to CreateContainer, but not the one after it: kubelet's volume
// reconciler runs beside the pod worker, and an update that lands between the runtime's
// CreateContainer and its mount of the bind (inside StartContainer) leaves the bind holding a
// deleted inode again; nothing a plugin checks at create can stay true. And a bind of a bind
// whose root was deleted is refused by the kernel, so pinning the file does not help either.
//
// So for a subPath of an atomic-writer volume (configMap, secret, downwardAPI, projected) the
// container gets a private copy of the content the subPath names at CreateContainer, in place
// of kubelet's bind: a copy that nothing updates cannot go stale. kubelet documents that such a
// subPath never receives updates, so a copy changes nothing the container may rely on. The copy
// is read through the same safe resolution as a repair (locate: ..data beneath the volume
// directory, no symlink out, the type of the bind), keeps mode, owner and SELinux label, and
// lives on a root-only tmpfs (PrepareCopyDir) so secrets never reach a disk.
//
// Which subPaths are copied is decided from kubelet's layout, not from names: the bind's
// source must lie, on the same device, below an atomic-writer plugin directory of the pod
// (findVolume). Every other subPath (hostPath, emptyDir, PVC/CSI, ...) keeps kubelet's bind and
// is only repaired if it went stale.
//
// Copies are bounded: per pod in bytes and entries (Budget; every entry costs at least a
// page, so empty files are not free), per node by the tmpfs (size and nr_inodes), and in time
// (the caller's context, checked before every entry). A copy that cannot be made within them
// is given up: the copying stops, what it wrote is removed and its charge returned, and the
// subPath keeps kubelet's bind (a Fallback): one pod over its budget cannot take another
// pod's copies, and the container starts as kubelet would start it.

// Budget bounds the copies (configs.SubPathCopies).
type Budget struct {
	PodBytes, PodEntries   int64
	NodeBytes, NodeEntries int64
}

// pageSize is what one entry of a copy costs at least.
const pageSize = 4096

// entryCost is what one entry of a copy is charged: its content rounded up to pages, and at
// least one page (an inode, a directory block, a symlink).
func entryCost(size int64) int64 {
	if size <= pageSize {
		return pageSize
	}
	return (size + pageSize - 1) / pageSize * pageSize
}

// Copy is one container's private copy of what an atomic-writer subPath names.
type Copy struct {
	Target  Target
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

// usage is what copies were charged.
type usage struct{ bytes, entries int64 }

// Copies makes and removes the copies of containers below Dir:
// Dir/<pod UID>/<container ID>/<volume>/<index>.
type Copies struct {
	Dir    string
	Budget Budget
	r      *Repairer

	mu       sync.Mutex
	prepared bool
	// pods is what each pod's copies were charged; a pod not in it is counted from Dir on
	// first use (after a restart or a reload, the copies of running containers stay).
	pods map[string]*usage
	// ctrs is the pod and charge of each container copied since this Copies was made.
	ctrs map[string]ctrCopies
}

type ctrCopies struct {
	pod string
	usage
}

// prepare makes Dir a tmpfs on first use, so that a node without subPaths never gets one.
func (c *Copies) prepare() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prepared {
		return nil
	}
	if err := PrepareCopyDir(c.Dir, c.Budget.NodeBytes, c.Budget.NodeEntries); err != nil {
		return err
	}
	c.prepared = true
	return nil
}

// Copies returns the copier for dir, which becomes a tmpfs of budget's node size on first
// use (PrepareCopyDir).
func (r *Repairer) Copies(dir string, budget Budget) *Copies {
	return &Copies{Dir: dir, Budget: budget, r: r, pods: map[string]*usage{}, ctrs: map[string]ctrCopies{}}
}

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
func (c *Copies) CopySources(ctx context.Context, id string, sources []string) ([]Copy, []string, []Fallback) {
	var copies []Copy
	var rest []string
	var fallbacks []Fallback
	for _, src := range sources {
		t, ok := ParseTarget(c.r.root, src)
		if !ok {
			continue
		}
		cp, atomic, err := c.copy(ctx, id, t)
		switch {
		case !atomic:
			rest = append(rest, src)
		case err != nil:
			fallbacks = append(fallbacks, fallback(t, err))
		default:
			copies = append(copies, cp)
		}
	}
	return copies, rest, fallbacks
}

// copyAttempts: an update that removes the timestamp directory while a directory is copied
// makes the copy fail (ENOENT); the next attempt resolves ..data again.
const copyAttempts = 3

// copy makes container id's copy of target t. atomic says t is a subPath of an atomic-writer
// volume (else nothing was done: it is for RepairSources).
func (c *Copies) copy(ctx context.Context, id string, t Target) (Copy, bool, error) {
	cp, atomic, err := c.copyAttempts(ctx, id, t)
	if e := (*Error)(nil); errors.As(err, &e) {
		e.Copy = true
	}
	return cp, atomic, err
}

func (c *Copies) copyAttempts(ctx context.Context, id string, t Target) (Copy, bool, error) {
	return c.copyTo(ctx, id, t, filepath.Join(c.Dir, t.PodUID, id, t.Volume, strconv.Itoa(t.Index)))
}

// copyTo makes container id's copy of target t at dst (a live update's new version names its
// own).
func (c *Copies) copyTo(ctx context.Context, id string, t Target, dst string) (Copy, bool, error) {
	err := errChanged
	for range copyAttempts {
		l, lerr := c.r.locate(t, false, true)
		switch {
		case errors.Is(lerr, ErrUnknownVolume), errors.Is(lerr, ErrNotMounted):
			return Copy{}, false, nil
		case lerr != nil:
			return Copy{}, true, lerr
		}
		cp := Copy{Target: t, Kind: l.kind, SubPath: l.res.SubPath, Path: dst, VolumeDir: l.volPath, Data: readData(l.volDir)}
		var used usage
		used, err = c.copyLocated(ctx, id, l, dst)
		what := l.what
		l.Close()
		switch {
		case err == nil:
			cp.Bytes, cp.Entries = used.bytes, used.entries
			return cp, true, nil
		case errors.Is(err, ErrOverBudget):
			return Copy{}, true, &Error{Target: t, Reason: fmt.Sprintf("%s cannot be copied within the pod's budget (subPathCopies.podBytes %d, podEntries %d)", what, c.Budget.PodBytes, c.Budget.PodEntries), Err: err}
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errChanged):
			return Copy{}, true, &Error{Target: t, Reason: "cannot copy " + what, Err: err}
		}
	}
	return Copy{}, true, &Error{Target: t, Reason: fmt.Sprintf("the volume changed under each of %d copies", copyAttempts), Err: err}
}

// copyLocated copies what l located to dst, charging the pod, and leaves nothing when it
// fails: dst, the directories made for it and the charge are removed.
func (c *Copies) copyLocated(ctx context.Context, id string, l *located, dst string) (usage, error) {
	t := l.t
	if !containerID().MatchString(id) {
		return usage{}, fmt.Errorf("container ID %q cannot name a copy directory", id)
	}
	if err := ctx.Err(); err != nil {
		return usage{}, fmt.Errorf("copy given up: %w", err)
	}
	if err := c.prepare(); err != nil {
		return usage{}, fmt.Errorf("no directory for private copies: %w", err)
	}
	c.mu.Lock()
	err := os.MkdirAll(filepath.Dir(dst), 0o700)
	c.mu.Unlock()
	if err != nil {
		return usage{}, err
	}
	ch := &charger{c: c, pod: t.PodUID}
	err = c.r.host.CopyTree(ctx, l.volDir, l.res.Rel, l.obj, dst, ch.charge)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("copy given up: %w", ctx.Err()) // the caller stopped waiting: nobody binds it
	}
	if err != nil {
		os.RemoveAll(dst) // dst is this copy's alone: no lock, which other pods' copies take
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.removeEmpty(filepath.Dir(dst), filepath.Join(c.Dir, t.PodUID))
		c.uncharge(t.PodUID, ch.used)
		return usage{}, err
	}
	cc := c.ctrs[id]
	cc.pod = t.PodUID
	cc.bytes += ch.used.bytes
	cc.entries += ch.used.entries
	c.ctrs[id] = cc
	return ch.used, nil
}

// readData is what the ..data link of the volume directory dir names now ("" if none).
func readData(dir *Node) string {
	var buf [256]byte
	n, err := unix.Readlinkat(dir.fd, "..data", buf[:])
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// release returns used, what one of container id's copies in pod was charged, once the copy
// is gone (a live update's old version).
func (c *Copies) release(id, pod string, used usage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uncharge(pod, used)
	if cc, ok := c.ctrs[id]; ok {
		cc.bytes = max(cc.bytes-used.bytes, 0)
		cc.entries = max(cc.entries-used.entries, 0)
		c.ctrs[id] = cc
	}
}

// removeCopyDir removes a container's copy directory; a live copy's mounts (Follower) are
// detached first, which a plain removal meets as EBUSY.
func removeCopyDir(dir string) error {
	err := os.RemoveAll(dir)
	if errors.Is(err, unix.EBUSY) {
		if err = (liveLayers{}).detachBelow(dir); err == nil {
			err = os.RemoveAll(dir)
		}
	}
	return err
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
	used usage
}

// charge charges one entry of cost bytes, or returns ErrOverBudget.
func (ch *charger) charge(cost int64) error {
	c := ch.c
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.podUsage(ch.pod)
	if u.bytes+cost > c.Budget.PodBytes || u.entries+1 > c.Budget.PodEntries {
		return fmt.Errorf("%w: %d bytes in %d entries charged already", ErrOverBudget, u.bytes, u.entries)
	}
	u.bytes += cost
	u.entries++
	ch.used.bytes += cost
	ch.used.entries++
	return nil
}

// podUsage is what pod's copies were charged, counted from Dir when not known. Callers hold
// c.mu.
func (c *Copies) podUsage(pod string) *usage {
	if u := c.pods[pod]; u != nil {
		return u
	}
	u := &usage{}
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
		u.bytes += entryCost(size)
		u.entries++
		return nil
	})
	c.pods[pod] = u
	return u
}

// uncharge returns used to pod's budget. Callers hold c.mu.
func (c *Copies) uncharge(pod string, used usage) {
	u := c.pods[pod]
	if u == nil {
		return
	}
	u.bytes = max(u.bytes-used.bytes, 0)
	u.entries = max(u.entries-used.entries, 0)
	if u.bytes == 0 && u.entries == 0 {
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
		c.uncharge(cc.pod, cc.usage)
		c.removeEmpty(filepath.Join(c.Dir, cc.pod), filepath.Join(c.Dir, cc.pod))
		return err
	}
	// Copied before this Copies was made (a restart, a reload): find its pod.
	dirs, _ := filepath.Glob(filepath.Join(c.Dir, "*", id))
	var errs []error
	for _, d := range dirs {
		errs = append(errs, removeCopyDir(d))
		pod := filepath.Dir(d)
		delete(c.pods, filepath.Base(pod)) // counted again from Dir on next use
		c.removeEmpty(pod, pod)
	}
	return errors.Join(errs...)
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
		delete(c.pods, p.Name()) // counted again from Dir on next use
		c.removeEmpty(podDir, podDir)
	}
	return removed, errors.Join(errs...)
}
