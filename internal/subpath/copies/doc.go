// Package copies makes containers' private copies of atomic-writer subPaths within budgets
// (kubernetes #127602), and removes them.
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
// is read through the same safe resolution as a repair (subpath.Repairer.Locate: ..data beneath
// the volume directory, no symlink out, the type of the bind), keeps mode, owner and SELinux label, and
// lives on a root-only tmpfs (PrepareCopyDir) so secrets never reach a disk.
//
// Which subPaths are copied is decided from kubelet's layout, not from names: the bind's
// source must lie, on the same device, below an atomic-writer plugin directory of the pod
// (package subpath's findVolume). Every other subPath (hostPath, emptyDir, PVC/CSI, ...) keeps kubelet's bind and
// is only repaired if it went stale.
//
// Copies are bounded: per pod in bytes and entries (Budget; every entry costs at least a
// page, so empty files are not free) where the pages are, on the pod's own tmpfs sized to its
// budget (tmpfs.go: a copy removed while still held open keeps its pages there), per node by
// charging (every pod's charge and what pods' tmpfs hold beyond it), and in time
// (the caller's context, checked before every entry). A copy that cannot be made within them
// is given up: the copying stops, what it wrote is removed and its charge returned, and the
// subPath keeps kubelet's bind (a Fallback): one pod over its budget cannot take another
// pod's copies, and the container starts as kubelet would start it.
//
// The tree copier (system.go) opens nothing but regular files and directories, never
// blocking (O_NONBLOCK: a FIFO or device swapped in after the type check is refused by its
// type), and follows no symlink below the object located: every entry is opened with openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS relative to its parent (InTree), a
// symlink inside a directory is copied as a symlink. Each entry is charged (EntryCost) before it
// is written.
//
// It imports package subpath (kubelet's layout, the safe resolution, Fallback and its reasons)
// and nothing of package liveupdate, which uses its charging (CopyTo, Release, Usage) for the
// versions of live copies.
package copies
