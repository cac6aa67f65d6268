package liveupdate

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
)

// Mount layers of a live subPath copy.
//
// The copy's path P is made a mount point of its own, the base: a bind of itself in a peer
// group of its own (makeBase). The container binds P with rslave propagation, so its mount is
// a slave of the base's group. An update is a new versioned copy beside P (P.v<N>), cloned
// (open_tree) and attached at P (putLayer):
//
//   - the first one on top of the base: a mount on the root of a shared mount propagates to
//     its slaves, so the container's mount gets a copy of it on top;
//   - every later one beneath the layer on top (MOVE_MOUNT_BENEATH): its parent is the base,
//     so it propagates as a mount on the base would, and in the container's namespace it is
//     tucked beneath the copy of the top layer there (the kernel tucks a propagated mount
//     under one that already sits at its place); then the old top layer is detached, and the
//     unmount propagates to its copies (they have no children), so the new layer shows.
//
// At any moment P holds the base and at most two layers, one once settled; so does the
// container. Each open() of the path after the old layer is detached resolves to the new
// layer's whole file or directory, and before it to the old one; descriptors opened before
// keep their file. There is never a moment without a mount on the path, so never ENOENT, and
// nothing is unmounted from under a busy path (MNT_DETACH), so never EBUSY.
//
// The base and the layers are cloned private and read-only before they are attached
// (privateClone). Attached below the shared base, a layer becomes shared in a group of its own
// whose slaves are its copies in the containers.
//
// Read-only from the moment they exist: the volumes copied (configMap, secret, downwardAPI,
// projected) are read-only in a container, and a mount that reaches the container by
// propagation is a copy of the host's with the host mount's flags, not the container's bind's:
// runc's "ro" remount of its bind does not reach the layers that come later. So the clone is
// made read-only in the same mount_setattr that makes it private (and idmaps it), before it
// is attached anywhere; the base, each layer, and every copy of them in a container are read-only
// with no moment when one is not. What the agent itself writes never goes through them: a
// new version is written beside the path (P.v<N>, on the copy tmpfs), an old one is removed
// there, and a base is emptied through a clone of the tmpfs without its mounts (rawTree).
//
// The update must not begin before the container's runtime bound P: the bind takes the mount
// on top at P, and a container that bound a layer would be a slave of that layer's group,
// which the next update leaves (Follower.Arm).

// layerOps are the mount side effects of live copies.
type layerOps interface {
	// makeBase makes path a read-only bind of itself, shared in a peer group of its own.
	makeBase(path string) error
	// putLayer attaches a read-only clone of version at base (whose own root, within the copy
	// tmpfs, is baseRoot): on top of the base if it has no layer yet, else beneath the top layer,
	// which is then detached. With userns >= 0 (a user namespace descriptor) the clone is
	// idmapped with it first.
	putLayer(base, baseRoot, version string, userns int) error
	// detachBelow unmounts every mount at or below dir.
	detachBelow(dir string) error
}

// systemLayers is layerOps on the running host (System's descriptor calls).
type systemLayers struct{}

var _ layerOps = systemLayers{}

func openPath(path string) (*subpath.Node, error) {
	return subpath.System{}.Open(nil, path, unix.OpenHow{Flags: unix.O_NOFOLLOW})
}

// setPropagation is mount_setattr(2) of the mount tree is the root of (Linux >= 5.12).
func setPropagation(tree *subpath.Node, propagation uint64) error {
	if err := unix.MountSetattr(tree.FD(), "", unix.AT_EMPTY_PATH, &unix.MountAttr{Propagation: propagation}); err != nil {
		return fmt.Errorf("mount_setattr %s: %w", tree.Name, err)
	}
	return nil
}

// cloneAttr is what a detached clone of a copy is given before it is attached: private,
// read-only, and idmapped with userns when userns >= 0 (a user namespace descriptor).
func cloneAttr(userns int) *unix.MountAttr {
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY, Propagation: unix.MS_PRIVATE}
	if userns >= 0 {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(userns)
	}
	return attr
}

// privateClone opens path and makes a detached bind of it (open_tree), private and read-only
// (and idmapped with userns >= 0) in one mount_setattr: a clone of the shared copy tmpfs is its
// peer otherwise, and the tmpfs' events would propagate into it (a layer on a base of the
// tmpfs' group would propagate back onto the tmpfs at P); and it is writable otherwise. The
// caller closes both.
func privateClone(path string, userns int) (n, tree *subpath.Node, err error) {
	if n, err = openPath(path); err != nil {
		return nil, nil, err
	}
	if tree, err = (subpath.System{}).Clone(n); err == nil {
		if err = unix.MountSetattr(tree.FD(), "", unix.AT_EMPTY_PATH, cloneAttr(userns)); err != nil {
			err = fmt.Errorf("make the clone of %s private and read-only (idmapped: %t): %w", tree.Name, userns >= 0, err)
			tree.Close()
		}
	}
	if err != nil {
		n.Close()
		return nil, nil, err
	}
	return n, tree, nil
}

func (systemLayers) makeBase(path string) error {
	n, tree, err := privateClone(path, -1)
	if err != nil {
		return err
	}
	defer n.Close()
	defer tree.Close()
	if _, err := (subpath.System{}).Attach(tree, n, false); err != nil {
		return err
	}
	if err := setPropagation(tree, unix.MS_SHARED); err != nil {
		_ = subpath.System{}.Detach(tree)
		return err
	}
	return nil
}

func (systemLayers) putLayer(base, baseRoot, version string, userns int) error {
	// The container's bind of the base is idmapped by the runtime; a mount that reaches it by
	// propagation is a copy of ours, with our mapping: the same one.
	v, tree, err := privateClone(version, userns)
	if err != nil {
		return err
	}
	defer v.Close()
	defer tree.Close()
	top, err := openPath(base)
	if err != nil {
		return err
	}
	defer top.Close()
	m, err := subpath.System{}.Mount(top)
	if err != nil {
		return err
	}
	if !top.MountRoot {
		return fmt.Errorf("%s is not a mount point: its base is missing", base)
	}
	if m.Root == baseRoot {
		_, err := subpath.System{}.Attach(tree, top, false)
		return err
	}
	if _, err := (subpath.System{}).Attach(tree, top, true); err != nil {
		return err
	}
	return subpath.System{}.Detach(top)
}

// detachBelow is copies.DetachBelow.
func (systemLayers) detachBelow(dir string) error { return copies.DetachBelow(dir) }
