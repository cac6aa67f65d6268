package subpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
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
// directory, no symlink out, the type of the bind), keeps mode, owner and SELinux label, lives
// on a root-only tmpfs (PrepareCopyDir) so secrets never reach a disk, and is bounded in size.
// Writable volumes (emptyDir, PVC) are live by design and are repaired in place instead.

// DefaultCopyLimit bounds one subPath copy. A configMap or secret holds at most 1 MiB; a
// projected volume combines a few of them.
const DefaultCopyLimit = 16 << 20

// ErrTooLarge says a subPath's content is larger than the copy limit.
var ErrTooLarge = errors.New("larger than the copy limit")

// Copy is one container's private copy of what an atomic-writer subPath names.
type Copy struct {
	Target  Target
	Kind    string // configMap, secret, downwardAPI, projected
	SubPath string // the key
	Path    string // the copy: a file or directory below the copy dir
	Bytes   int64
}

// Copies makes and removes the copies of containers below Dir: Dir/<container ID>/<volume>/<index>.
type Copies struct {
	Dir   string
	Limit int64
	r     *Repairer

	mu       sync.Mutex
	prepared bool
}

// CopyDirSize bounds the tmpfs that holds every container's copies.
const CopyDirSize = 256 << 20

// prepare makes Dir a tmpfs on first use, so that a node without subPaths never gets one.
func (c *Copies) prepare() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prepared {
		return nil
	}
	if err := PrepareCopyDir(c.Dir, CopyDirSize); err != nil {
		return err
	}
	c.prepared = true
	return nil
}

// Copies returns the copier for dir, which must be a tmpfs (PrepareCopyDir).
func (r *Repairer) Copies(dir string, limit int64) *Copies {
	return &Copies{Dir: dir, Limit: limit, r: r}
}

// containerID is what a runtime's container ID may look like to name a directory. Compiled on
// first use: at package init it cost every start of the binary (the hook's two processes per
// container among them) about 0.3 ms, the {0,127} repetition being expanded.
var containerID = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
})

// CopySources makes container id's copies of the subPath targets among sources that belong to
// atomic-writer volumes. It returns them, and the other subPath targets (for Repair). An error
// names the volume and subPath; the copies made before it are removed with the container's
// directory by the caller (Remove).
func (c *Copies) CopySources(id string, sources []string) ([]Copy, []string, error) {
	var copies []Copy
	var rest []string
	var errs []error
	for _, src := range sources {
		t, ok := ParseTarget(c.r.root, src)
		if !ok {
			continue
		}
		cp, atomic, err := c.copy(id, t)
		switch {
		case err != nil:
			errs = append(errs, err)
		case atomic:
			copies = append(copies, cp)
		default:
			rest = append(rest, src)
		}
	}
	return copies, rest, errors.Join(errs...)
}

// copyAttempts: an update that removes the timestamp directory while a directory is copied
// makes the copy fail (ENOENT); the next attempt resolves ..data again.
const copyAttempts = 3

func (c *Copies) copy(id string, t Target) (Copy, bool, error) {
	if !containerID().MatchString(id) {
		return Copy{}, false, fmt.Errorf("container ID %q cannot name a copy directory", id)
	}
	dir := filepath.Join(c.Dir, id, t.Volume)
	dst := filepath.Join(dir, strconv.Itoa(t.Index))
	var err error
	for range copyAttempts {
		var l *located
		if l, err = c.r.locate(t, false); err != nil {
			return Copy{}, false, err
		}
		if !l.atomic {
			l.Close()
			return Copy{}, false, nil
		}
		if err := c.prepare(); err != nil {
			l.Close()
			return Copy{}, true, &Error{Target: t, Reason: "no directory for private copies", Err: err}
		}
		cp := Copy{Target: t, Kind: l.kind, SubPath: l.res.SubPath, Path: dst}
		if err = os.MkdirAll(dir, 0o700); err == nil {
			os.RemoveAll(dst)
			cp.Bytes, err = c.r.host.CopyTree(l.obj, dst, c.Limit)
		}
		what := l.what
		l.Close()
		switch {
		case err == nil:
			return cp, true, nil
		case errors.Is(err, ErrTooLarge):
			return Copy{}, true, &Error{Target: t, Reason: fmt.Sprintf("%s is larger than %d bytes, the limit for a private copy: mount the volume without subPath", what, c.Limit), Err: err}
		case !errors.Is(err, os.ErrNotExist):
			return Copy{}, true, &Error{Target: t, Reason: "cannot copy " + what, Err: err}
		}
	}
	return Copy{}, true, &Error{Target: t, Reason: fmt.Sprintf("the volume changed under each of %d copies", copyAttempts), Err: err}
}

// Remove removes container id's copies. The container's mounts keep what they bound.
func (c *Copies) Remove(id string) error {
	if !containerID().MatchString(id) {
		return nil
	}
	return os.RemoveAll(filepath.Join(c.Dir, id))
}

// Sweep removes the copies of every container not in keep (containers removed while the
// plugin was away) and returns their IDs.
func (c *Copies) Sweep(keep map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(c.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if keep[e.Name()] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(c.Dir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}
