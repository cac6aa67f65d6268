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

// NewRepairer returns a Repairer with real side effects (Live).
func NewRepairer(kubeletRoot string) *Repairer { return NewRepairerWith(kubeletRoot, Live{}) }

// NewRepairerWith returns a Repairer that acts through host.
func NewRepairerWith(kubeletRoot string, host Host) *Repairer {
	return &Repairer{root: filepath.Clean(kubeletRoot), host: host}
}

// KubeletRoot is the kubelet root dir the Repairer works below.
func (r *Repairer) KubeletRoot() string { return r.root }

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
	fail := func(reason string, err error) error { return &Error{Target: t, Reason: reason, Err: err} }
	if pt, ok := ParseTarget(r.root, t.Path); !ok || pt != t {
		return Repair{}, fail("not a subPath bind target below kubelet root "+r.root, nil)
	}

	root, err := r.host.Open(nil, r.root, unix.OpenHow{Flags: unix.O_DIRECTORY})
	if err != nil {
		return Repair{}, fail("cannot open the kubelet root dir", err)
	}
	defer root.Close()
	pod := "pods/" + t.PodUID
	subpaths, err := r.host.Open(root, pod+"/"+subpathsDir, unix.OpenHow{Flags: unix.O_DIRECTORY, Resolve: kubeletOwned})
	if err != nil {
		return Repair{}, fail("cannot open the pod's subPath dir", err)
	}
	defer subpaths.Close()
	stale, err := r.host.Open(subpaths, t.rel(), unix.OpenHow{Flags: unix.O_NOFOLLOW, Resolve: kubeletOwned})
	if err != nil {
		return Repair{}, fail("cannot open the bind target", err)
	}
	defer stale.Close()
	if !isStale(stale.Info) || !stale.MountRoot {
		return Repair{}, fail("the target holds no deleted file or directory", ErrNotStale)
	}

	// 1. What the stale bind held, as a path within its filesystem.
	staleMount, err := r.host.Mount(stale)
	if err != nil {
		return Repair{}, fail("cannot read the stale bind's mount", err)
	}
	oldRoot, ok := staleRoot(staleMount.Root)
	if !ok {
		return Repair{}, fail(fmt.Sprintf("the bind's root %q is not marked deleted", staleMount.Root), ErrNotStale)
	}

	// 2. The volume directory, and the subPath below it.
	volDir, plugin, err := r.openVolume(root, pod, t.Volume)
	if err != nil {
		return Repair{}, fail("cannot find the volume's directory", err)
	}
	defer volDir.Close()
	kind, _ := volumeKind(plugin)
	volPath, err := r.host.Path(volDir)
	if err != nil {
		return Repair{}, fail("cannot name the "+kind+" volume's directory", err)
	}
	volMount, err := r.host.Mount(volDir)
	if err != nil {
		return Repair{}, fail("cannot read the mount of "+kind+" volume dir "+volPath, err)
	}
	volFS, err := fsPath(volPath, volMount.Point, volMount.Root)
	if err != nil {
		return Repair{}, fail("cannot place "+kind+" volume dir "+volPath+" in its filesystem", err)
	}
	if staleMount.Major != volMount.Major || staleMount.Minor != volMount.Minor {
		return Repair{}, fail(fmt.Sprintf("the stale bind (%s) is on device %d:%d, but %s volume dir %s is on %d:%d",
			oldRoot, staleMount.Major, staleMount.Minor, kind, volPath, volMount.Major, volMount.Minor), nil)
	}
	remainder, ok := within(volFS, oldRoot)
	if !ok || remainder == "" {
		return Repair{}, fail(fmt.Sprintf("the stale bind held %s, which is not below %s volume dir %s (%s in its filesystem)",
			oldRoot, kind, volPath, volFS), nil)
	}
	oldSource := path.Join(volPath, remainder)

	// 3, 4. What the subPath names now.
	res, err := planResolution(plugin, remainder)
	if err != nil {
		return Repair{}, fail(fmt.Sprintf("cannot tell which subPath of %s volume %s the stale bind held", kind, t.Volume), err)
	}
	what := describe(kind, t.Volume, res)

	// 5. Open it safely, and check its type.
	obj, err := r.host.Open(volDir, res.Rel, unix.OpenHow{Resolve: inVolume})
	if err != nil {
		return Repair{}, fail(resolveFailure(kind, t.Volume, res, err), err)
	}
	defer obj.Close()
	if err := sameType(stale.Mode, obj.Mode); err != nil {
		return Repair{}, fail(what+" cannot replace the stale bind", err)
	}
	newSource, err := r.host.Path(obj)
	if err != nil {
		return Repair{}, fail("cannot name "+what, err)
	}

	// 6. Re-bind in place.
	if err := r.rebind(t, subpaths, stale, staleMount, obj); err != nil {
		return Repair{}, fail("re-binding "+what+" failed", err)
	}
	if now, err := r.host.Path(obj); err == nil {
		newSource = now // where the bound object is now, should it have moved meanwhile
	}
	return Repair{Target: t, VolumeDir: volPath, SubPath: res.SubPath, OldSource: oldSource, NewSource: newSource, Kind: kind}, nil
}

// openVolume opens pods/<uid>/volumes/<plugin>/<volume>, for the one plugin dir that has it
// (for a CSI volume, the directory it is mounted on: <volume>/mount).
func (r *Repairer) openVolume(root *Node, pod, volume string) (*Node, string, error) {
	volumes, err := r.host.Open(root, pod+"/volumes", unix.OpenHow{Flags: unix.O_DIRECTORY, Resolve: kubeletOwned})
	if err != nil {
		return nil, "", err
	}
	defer volumes.Close()
	plugins, err := r.host.Names(volumes)
	if err != nil {
		return nil, "", err
	}
	var found []string
	var dir *Node
	for _, p := range plugins {
		n, err := r.host.Open(volumes, p+"/"+volume, unix.OpenHow{Flags: unix.O_DIRECTORY | unix.O_NOFOLLOW, Resolve: kubeletOwned})
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
			continue
		case err != nil:
			dir.Close()
			return nil, "", err
		}
		found = append(found, p)
		if dir == nil {
			dir = n
		} else {
			n.Close()
		}
	}
	plugin, err := pickPlugin(volume, found)
	if err != nil {
		dir.Close()
		return nil, "", err
	}
	if content := volumeContent(plugin); content != "" {
		defer dir.Close()
		if dir, err = r.host.Open(dir, content, unix.OpenHow{Flags: unix.O_DIRECTORY | unix.O_NOFOLLOW, Resolve: kubeletOwned}); err != nil {
			return nil, "", err
		}
	}
	return dir, plugin, nil
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
		return fmt.Errorf("the stale bind was detached, but binding on the placeholder failed, which is left without a mount (Stale reports it): %w", err)
	}
	if needsPrivate(staleMount, m) {
		return r.host.MakePrivate(tree)
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
