// Package subpath knows kubelet's subPath layout: it finds subPath bind targets, repairs the
// ones that went stale, and reports as a Fallback a subPath that it or its sub-packages could
// not handle. Package copies (below it) makes private copies of atomic-writer subPaths within
// budgets; package liveupdate makes live copies follow their volumes. The imports go one way:
// liveupdate -> copies -> subpath.
//
// A container that mounts one key of a configMap (or secret, downwardAPI, projected volume)
// with subPath gets, as its mount source, a bind target that kubelet made:
// <kubeletRoot>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>, a bind of the file
// kubelet resolved inside the volume, e.g. .../volumes/kubernetes.io~configmap/cfg/
// ..2026_11_22_07_00_00.123456789/app.conf. The atomic writer updates such a volume by writing a
// new ..<timestamp> directory, renaming ..data over to it and removing the old directory: the
// bind now holds a deleted inode, and when the container is created again runc fails with
// ENOENT (kubernetes #68211, #127602).
//
// Repairer finds such a target in O(1) (Stale: one statx, st_nlink == 0 on a mount root) and
// re-binds it in place (Repair), as kubelet >= 1.20 does before it starts a container. That is
// the chosen design, rather than replacing the mount's source in the container spec:
//   - the spec stays unchanged: same source, destination and options, so no other spec edit
//     (nri/, specmod/) has to know about it;
//   - the new bind comes from a file descriptor that was opened safely (openat2 with
//     RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS below the volume directory), so no container can race
//     it: a symlink swapped in after the check changes nothing. A source path string in the spec
//     would be resolved again by the runtime later, which reopens a time-of-check/time-of-use
//     window for every volume a container can write (emptyDir, hostPath, PVC/CSI);
//   - it works alike for every volume type.
//
// The new bind is a clone of the resolved descriptor (open_tree OPEN_TREE_CLONE) moved onto a
// descriptor of the target (move_mount), not mount(2) on a path string nor on a
// /proc/self/fd/N source: no path is resolved at all between the check and the bind, and the
// detached clone is exactly the object that was checked. The target is kubelet's, not
// container-writable; it is opened with no symlink followed, by openat2 below the pod's
// volume-subpaths directory.
//
// Where the kernel can (Linux >= 6.5), the clone is attached beneath the stale bind
// (MOVE_MOUNT_BENEATH) and the stale bind is then detached: the target always holds a mount,
// and a failure at any step leaves the stale bind on top, which runc refuses and Stale still
// reports. Older kernels detach the stale bind (MNT_DETACH; it holds a deleted inode) and then
// attach. The stale bind cannot be put back once detached (the kernel refuses to attach a
// mount of an unlinked dentry), so a failure there leaves kubelet's empty placeholder, which
// Stale reports as ErrNotMounted: no container must start with it.
//
// Propagation: the new bind propagates as kubelet's bind did. A clone of a mount (open_tree,
// like mount(2) MS_BIND) joins the source mount's propagation: below kubelet's root dir, which
// kubelet makes rshared, kubelet's subPath bind is a shared peer of the volume's mount, and so
// is the repaired one; that is needed, since the runtime refuses an rslave or rshared container
// mount (HostToContainer, Bidirectional) whose source is private. Where kubelet's bind was
// private and the clone came out shared (or slave), the clone is made private (mount_setattr),
// so that the repair never makes a mount propagate where kubelet's did not. In every case,
// attaching it below a shared parent propagates copies to the parent's peers, exactly as
// kubelet's own bind did.
//
// Never worse than kubelet: which volume a bind came from is what kubelet's layout proves (the
// one volume directory of the pod that holds the bind's source on the same device, findVolume),
// never a directory that merely carries the volume's name; a hostPath has none. A subPath that
// cannot be copied or repaired, for whatever reason, keeps kubelet's bind and is reported as a
// Fallback with a reason from a bounded set (Reasons), so that the front end logs and counts it
// and the container starts as kubelet would start it; a stale bind left so fails in the runtime
// as it would without mountkeeper. Copies are bounded per pod and per node and stop when their
// caller gives up (package copies).
//
// It is a package of its own because it holds knowledge of kubelet's on-disk layout and has
// mount side effects, and both the NRI plugin (nri/) and the OCI precreate hook (hook/) use it:
// it belongs neither in specmod, which only edits specs and is pure, nor in hostmount, which
// answers generic questions about host mounts. The rules (ParseTarget and the functions in
// rules.go and fallback.go) are pure and table-tested; the side effects sit behind Host
// (host.go), whose real implementation is System (system.go); it reads mounts through
// internal/mounttable (statmount(2), or mountinfo before Linux 6.8). What the sub-packages need
// of it is exported and no more: Repairer.Locate (the safe resolution a copy reads through),
// Node.FD, Openat2, StatFD, ThroughData, TypeName, NewFallback and the errors Fallback reasons
// are told from.
package subpath
