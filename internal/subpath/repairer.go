package subpath

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Repair describes one repaired mount, for the log line (pod, container, volume, old and new
// source).
type Repair struct {
	Target    Target
	VolumeDir string // the volume's directory: <kubeletRoot>/pods/<uid>/volumes/<plugin>/<volume> (CSI: .../mount)
	// SubPath is what the stale bind named inside the volume: the key (app.conf,
	// conf.d/app.ini) for an atomic-writer volume, else the path below the volume directory.
	SubPath   string
	OldSource string // the deleted file or directory the stale bind held
	NewSource string // what the target holds now
	// Kind is the volume's kind as a pod spec names it: configMap, secret, emptyDir, ...
	Kind string
}

// Repairer finds and repairs stale subPath mounts below one kubelet root dir.
type Repairer struct {
	root string
	host Host
}

// NewRepairer returns a Repairer with real side effects (System).
func NewRepairer(kubeletRoot string) *Repairer { return NewRepairerWith(kubeletRoot, System{}) }

// Root is the kubelet root dir it repairs below.
func (r *Repairer) Root() string { return r.root }

// NewRepairerWith returns a Repairer that acts through host.
func NewRepairerWith(kubeletRoot string, host Host) *Repairer {
	return &Repairer{root: filepath.Clean(kubeletRoot), host: host}
}

// Stale reports, in O(1), whether the target is stale: one statx of the target, whose
// st_nlink == 0 on a mount root means the bind holds a deleted inode. It does not read
// mountinfo, so its cost does not grow with the number of mounts on the node. A target that is
// not a mount point at all (kubelet always binds before it creates a container; a failed
// repair on a kernel older than 6.5 can leave one) is an error wrapping ErrNotMounted.
func (r *Repairer) Stale(t Target) (bool, error) {
	info, err := r.host.Stat(t.Path)
	if err != nil {
		return false, fmt.Errorf("check subPath mount %s of volume %s: %w", t.Path, t.Volume, err)
	}
	if info.MountRootKnown && !info.MountRoot {
		return false, fmt.Errorf("subPath target %s of volume %s is not a mount point: kubelet's bind is missing and the container would get an empty placeholder: %w",
			t.Path, t.Volume, ErrNotMounted)
	}
	return isStale(info), nil
}

// Resolution flags. Kubelet's own directories are walked with no symlink at all; inside the
// volume, whose content a container may control, symlinks are followed only while they stay
// below the volume directory, and never through a magic link (/proc/<pid>/root, fd links).
const (
	kubeletOwned = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
	inVolume     = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
)

// Located is what a subPath bind target holds and what its subPath names in the volume now,
// each opened safely (O_PATH descriptors). Close releases them.
type Located struct {
	Target            Target // the target located
	subpaths, target  *Node
	VolumeDir, Object *Node // the volume's directory and what the subPath names in it
	targetMount       Mount
	VolumePath, Kind  string // the volume directory's path; the volume's kind (configMap, ...)
	oldSource         string
	Resolution        Resolution
	atomic            bool
	What              string // the subPath as messages name it
}

// Close releases the descriptors.
func (l *Located) Close() {
	for _, n := range []*Node{l.Object, l.VolumeDir, l.target, l.subpaths} {
		n.Close()
	}
}

// Locate opens target t of an atomic-writer volume and what its subPath names in the volume
// now, for a copy (package copies): locate without a repair's demand that the target hold a
// deleted object. An error wrapping ErrUnknownVolume says the subPath is of no atomic-writer
// volume.
func (r *Repairer) Locate(t Target) (*Located, error) { return r.locate(t, false, true) }

// locate opens target t and finds what its subPath names in the volume now, with every check
// of Repair's steps 1 to 5 (see Repair). stale says the target must hold a deleted file or
// directory (a repair); otherwise it may hold either (a copy). atomic looks for the volume
// among the atomic-writer plugin directories only (a copy): an error wrapping ErrUnknownVolume
// then says the subPath is of no atomic-writer volume.
func (r *Repairer) locate(t Target, stale, atomic bool) (_ *Located, err error) {
	fail := func(reason string, err error) error { return &Error{Target: t, Reason: reason, Err: err} }
	if pt, ok := ParseTarget(r.root, t.Path); !ok || pt != t {
		return nil, fail("not a subPath bind target below kubelet root "+r.root, nil)
	}
	root, err := r.host.Open(nil, r.root, unix.OpenHow{Flags: unix.O_DIRECTORY})
	if err != nil {
		return nil, fail("cannot open the kubelet root dir", err)
	}
	defer root.Close()
	l := &Located{Target: t}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	pod := "pods/" + t.PodUID
	if l.subpaths, err = r.host.Open(root, pod+"/"+subpathsDir, unix.OpenHow{Flags: unix.O_DIRECTORY, Resolve: kubeletOwned}); err != nil {
		return nil, fail("cannot open the pod's subPath dir", err)
	}
	if l.target, err = r.host.Open(l.subpaths, t.rel(), unix.OpenHow{Flags: unix.O_NOFOLLOW, Resolve: kubeletOwned}); err != nil {
		return nil, fail("cannot open the bind target", err)
	}
	switch {
	case stale && (!isStale(l.target.Info) || !l.target.MountRoot):
		return nil, fail("the target holds no deleted file or directory", ErrNotStale)
	case !l.target.MountRoot:
		return nil, fail("the target is not a mount point: kubelet's bind is missing", ErrNotMounted)
	}

	// 1. What the bind holds, as a path within its filesystem.
	if l.targetMount, err = r.host.Mount(l.target); err != nil {
		return nil, fail("cannot read the bind's mount", err)
	}
	held, deleted := staleRoot(l.targetMount.Root)
	switch {
	case stale && !deleted:
		return nil, fail(fmt.Sprintf("the bind's root %q is not marked deleted", l.targetMount.Root), ErrNotStale)
	case !deleted:
		held = l.targetMount.Root
	}

	// 2. The volume directory that holds it, as kubelet's layout proves, and the subPath below
	// it.
	var plugin, remainder string
	if l.VolumeDir, plugin, l.VolumePath, remainder, err = r.findVolume(root, pod, t, l.targetMount, held, atomic); err != nil {
		return nil, fail("cannot find the volume's directory", err)
	}
	l.Kind, l.atomic = volumeKind(plugin)
	l.oldSource = path.Join(l.VolumePath, remainder)

	// 3, 4. What the subPath names now.
	if l.Resolution, err = planResolution(plugin, remainder); err != nil {
		return nil, fail(fmt.Sprintf("cannot tell which subPath of %s volume %s the bind held", l.Kind, t.Volume), err)
	}
	l.What = describe(l.Kind, t.Volume, l.Resolution)

	// 5. Open it safely, and check its type.
	if l.Object, err = r.host.Open(l.VolumeDir, l.Resolution.Rel, unix.OpenHow{Resolve: inVolume}); err != nil {
		return nil, fail(resolveFailure(l.Kind, t.Volume, l.Resolution, err), err)
	}
	if err := sameType(l.target.Mode, l.Object.Mode); err != nil {
		return nil, fail(l.What+" cannot replace the "+bindName(stale), err)
	}
	return l, nil
}

// Repair re-resolves a stale target and re-binds it in place, or returns an error that says
// which volume and subPath went stale and why it was not repaired (an *Error; it wraps
// ErrNotStale when the target holds no deleted inode).
//
// Steps: (1) the stale mount's root within its filesystem (statmount, or mountinfo) says what
// the bind held; (2) the volume directory below pods/<uid>/volumes/<plugin>/ must be on the
// same device and hold it, and the rest of the path is the subPath kubelet resolved; (3) for an
// atomic-writer volume that is ..<timestamp>/<key> and the key is looked up through ..data;
// (4) for any other volume the subPath is opened as it is; (5) the open is openat2 below the
// volume directory with RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS and the result must be of the
// stale bind's type; (6) a clone of the opened object replaces the stale bind on the target.
func (r *Repairer) Repair(t Target) (Repair, error) {
	l, err := r.locate(t, true, false)
	if err != nil {
		return Repair{}, err
	}
	defer l.Close()
	fail := func(reason string, err error) error { return &Error{Target: t, Reason: reason, Err: err} }
	newSource, err := r.host.Path(l.Object)
	if err != nil {
		return Repair{}, fail("cannot name "+l.What, err)
	}

	// 6. Re-bind in place.
	if err := r.rebind(t, l.subpaths, l.target, l.targetMount, l.Object); err != nil {
		return Repair{}, fail("re-binding "+l.What+" failed", err)
	}
	if now, err := r.host.Path(l.Object); err == nil {
		newSource = now // where the bound object is now, should it have moved meanwhile
	}
	return Repair{Target: t, VolumeDir: l.VolumePath, SubPath: l.Resolution.SubPath, OldSource: l.oldSource, NewSource: newSource, Kind: l.Kind}, nil
}

// findVolume finds the volume directory of the pod that holds what the bind holds (held, a
// path within the bind's filesystem): on the bind's device, with held strictly below the
// directory's place in its filesystem. That is what kubelet's layout proves, whatever the
// directories are named: a hostPath has no directory there at all, a PVC's is named after its
// PV (for CSI, <pv>/mount). With atomic, only the atomic-writer plugin directories named after
// the volume are looked at (a copy); otherwise every volume directory of the pod (a repair,
// rare: only for a stale bind). No directory, or more than one, is an error wrapping
// ErrUnknownVolume. It returns the directory, its plugin, its path and held's path below it.
func (r *Repairer) findVolume(root *Node, pod string, t Target, bind Mount, held string, atomic bool) (_ *Node, plugin, volPath, remainder string, err error) {
	volumes, err := r.host.Open(root, pod+"/volumes", unix.OpenHow{Flags: unix.O_DIRECTORY, Resolve: kubeletOwned})
	if errors.Is(err, unix.ENOENT) {
		return nil, "", "", "", fmt.Errorf("the pod has no volumes directory: %w", ErrUnknownVolume)
	}
	if err != nil {
		return nil, "", "", "", err
	}
	defer volumes.Close()
	type candidate struct{ plugin, rel string }
	var candidates []candidate
	if atomic {
		for _, p := range atomicPlugins() {
			candidates = append(candidates, candidate{p, p + "/" + t.Volume})
		}
	} else {
		plugins, err := r.host.Names(volumes)
		if err != nil {
			return nil, "", "", "", err
		}
		for _, p := range plugins {
			dir, err := r.host.Open(volumes, p, unix.OpenHow{Flags: unix.O_DIRECTORY | unix.O_NOFOLLOW, Resolve: kubeletOwned})
			if err != nil {
				continue
			}
			names, err := r.host.Names(dir)
			dir.Close()
			if err != nil {
				continue
			}
			for _, n := range names {
				rel := p + "/" + n
				if content := volumeContent(p); content != "" {
					rel += "/" + content
				}
				candidates = append(candidates, candidate{p, rel})
			}
		}
	}
	var found *Node
	var holders []string
	for _, c := range candidates {
		dir, err := r.host.Open(volumes, c.rel, unix.OpenHow{Flags: unix.O_DIRECTORY | unix.O_NOFOLLOW, Resolve: kubeletOwned})
		if err != nil {
			continue // not there, or not a directory: it holds nothing
		}
		rest, dirPath, ok := r.holds(dir, bind, held)
		if !ok {
			dir.Close()
			continue
		}
		holders = append(holders, c.rel)
		if found != nil {
			dir.Close()
			continue
		}
		found, plugin, volPath, remainder = dir, c.plugin, dirPath, rest
	}
	if err := pickVolume(held, holders); err != nil {
		found.Close()
		return nil, "", "", "", err
	}
	return found, plugin, volPath, remainder, nil
}

// holds says whether the volume directory dir holds held, what a bind on mount bind holds:
// on the same device, strictly below dir's place in its filesystem. It returns held's path
// below dir and dir's path.
func (r *Repairer) holds(dir *Node, bind Mount, held string) (rest, dirPath string, ok bool) {
	dirPath, err := r.host.Path(dir)
	if err != nil {
		return "", "", false
	}
	m, err := r.host.Mount(dir)
	if err != nil || m.Major != bind.Major || m.Minor != bind.Minor {
		return "", "", false
	}
	dirFS, err := fsPath(dirPath, m.Point, m.Root)
	if err != nil {
		return "", "", false
	}
	rest, ok = within(dirFS, held)
	return rest, dirPath, ok && rest != ""
}

// rebind replaces the stale bind on the target with a bind of obj.
//
// Where the kernel can (Linux >= 6.5), the new bind is attached beneath the stale one
// (MOVE_MOUNT_BENEATH) and the stale one is then detached: the target is never without a
// mount, and a failure at any step leaves the stale bind on top, which runc refuses and Stale
// reports, as before. The stale bind cannot be put back once detached (the kernel refuses to
// attach a mount of an unlinked dentry, ENOENT), so on older kernels, which detach first and
// attach then, a failed attach leaves kubelet's empty placeholder: Stale reports that as
// ErrNotMounted, so that no container starts with it.
func (r *Repairer) rebind(t Target, subpaths, stale *Node, staleMount Mount, obj *Node) error {
	tree, err := r.host.Clone(obj)
	if err != nil {
		return err
	}
	defer tree.Close()
	m, err := r.host.Attach(tree, stale, true)
	switch {
	case err == nil:
		if needsPrivate(staleMount, m) {
			if err := r.host.MakePrivate(tree); err != nil {
				return fmt.Errorf("the new bind is beneath the stale one, which stays on top: %w", err)
			}
		}
		if err := r.host.Detach(stale); err != nil {
			return fmt.Errorf("the new bind is beneath the stale one, which stays on top: %w", err)
		}
	case errors.Is(err, ErrNoBeneath):
		if err := r.replace(t, subpaths, stale, staleMount, tree, obj); err != nil {
			return err
		}
	default:
		return err
	}
	now, err := r.host.Open(subpaths, t.rel(), unix.OpenHow{Flags: unix.O_NOFOLLOW, Resolve: kubeletOwned})
	if err != nil {
		return fmt.Errorf("the target after the new bind: %w", err)
	}
	defer now.Close()
	if !now.MountRoot || now.Dev != obj.Dev || now.Ino != obj.Ino {
		return fmt.Errorf("the target %s does not show the new bind (device %d inode %d, want %d %d)",
			t.Path, now.Dev, now.Ino, obj.Dev, obj.Ino)
	}
	return nil
}

// replace detaches the stale bind and attaches tree on kubelet's placeholder, for kernels
// that cannot mount beneath.
func (r *Repairer) replace(t Target, subpaths, stale *Node, staleMount Mount, tree, obj *Node) error {
	if err := r.host.Detach(stale); err != nil {
		return err
	}
	m, err := r.attachOnPlaceholder(t, subpaths, tree, obj)
	if err != nil {
		return fmt.Errorf("the stale bind was detached, but binding on the placeholder failed, which is left without a mount (Stale reports it): %w (%w)", err, ErrNotMounted)
	}
	if needsPrivate(staleMount, m) {
		if err := r.host.MakePrivate(tree); err != nil {
			// A bind left in the volume's peer group would take the volume's mount events
			// into the container: it goes, and the placeholder is left, which Stale reports.
			if derr := r.host.Detach(tree); derr != nil {
				return fmt.Errorf("the new bind could not be made private (%w), nor detached: %w", err, derr)
			}
			return fmt.Errorf("the stale bind was detached, but the new bind could not be made private, so it was detached too, and the placeholder is left without a mount (Stale reports it): %w (%w)", err, ErrNotMounted)
		}
	}
	return nil
}

func (r *Repairer) attachOnPlaceholder(t Target, subpaths, tree, obj *Node) (Mount, error) {
	// The placeholder kubelet bound onto, reached below volume-subpaths with no symlink and
	// no mount crossed: the stale bind is gone and nothing else may sit there.
	placeholder, err := r.host.Open(subpaths, t.rel(), unix.OpenHow{Flags: unix.O_NOFOLLOW, Resolve: kubeletOwned | unix.RESOLVE_NO_XDEV})
	if err != nil {
		return Mount{}, err
	}
	defer placeholder.Close()
	if err := sameType(placeholder.Mode, obj.Mode); err != nil {
		return Mount{}, err
	}
	return r.host.Attach(tree, placeholder, false)
}

// bindName names the target's bind in messages.
func bindName(stale bool) string {
	if stale {
		return "stale bind"
	}
	return "bind"
}
