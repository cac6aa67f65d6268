// Package hook runs mountkeeper as an OCI runtime hook, for hosts without NRI: plain runc, a
// containerd runtime handler whose base_runtime_spec carries the hook, CRI-O or podman with
// hooks.d. It makes the same decision and the same checks as the NRI plugin, through the same
// engine (engine.Engine), from the same config.
//
// # Stages
//
//   - precreate (podman's hooks.d extension stage): the proposed config.json comes on stdin and
//     the adjusted one goes to stdout, through engine.Engine.Render, the code path of
//     `mountkeeper render` (Engine.Decide, as the NRI plugin). Fields mountkeeper does not
//     know survive the round trip. This is the only hook stage where a change to the spec
//     itself (and so subPath repair) is possible.
//   - prestart / createRuntime: the runtime (runc) has created the container's mount namespace
//     and mounted the config's mounts under the rootfs, but not yet pivoted into it. The OCI
//     state comes on stdin; the hook reads <bundle>/config.json, decides and checks, then
//     makes each class mount inside the container's mount namespace under its rootfs.
//
// # How a mount is made in the container's namespace
//
// On the host, in the runtime's mount namespace, each source is cloned with
// open_tree(OPEN_TREE_CLONE|AT_RECURSIVE) into a detached mount tree, and the tree gets its
// propagation (MS_PRIVATE, MS_SLAVE or MS_SHARED), read-only and the other options with
// mount_setattr(AT_RECURSIVE) while it is still detached. A clone of a shared mount is a peer
// of the host's mount, so after MS_SLAVE it receives the host's mounts and after MS_SHARED it
// also sends the container's mounts back: exactly rslave and rshared, whatever the
// propagation of the copy of the host's mounts inside the container's namespace (runc makes
// those rslave). No host path is ever opened from inside the container's namespace.
//
// One thread of the hook then enters the container's mount namespace (inMountNamespace):
// a goroutine locked to its OS thread, never unlocked, leaves the filesystem context it
// shares with the process's other threads (unshare(CLONE_FS), which setns(CLONE_NEWNS)
// requires) and enters the namespace through an open /proc/<pid>/ns/mnt (checked to be
// another namespace than the hook's own). That goroutine resolves each destination beneath
// the rootfs with openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS), creating missing components
// one at a time (mkdirat, then a RESOLVE_NO_SYMLINKS re-open), and attaches the tree onto the
// resolved descriptor with move_mount(MOVE_MOUNT_T_EMPTY_PATH): no path is walked twice. A
// destination that leaves the rootfs through a symlink in the image (an absolute symlink
// such as /data -> /etc, or ../.. relative ones), a symlink loop, or a /proc magic link fails
// with a message that names the symlink.
//
// Why no other code ever runs in the container's namespace (this is the one statement of
// it; enter.go refers here):
//
//   - The goroutine is locked to its OS thread (runtime.LockOSThread) and never unlocked, so
//     while it runs the Go runtime schedules nothing else on that thread, and when it returns
//     the runtime ends the thread instead of reusing it (Go >= 1.10).
//   - It is never the main thread: the runtime cannot end that one (it parks it for good
//     instead), and the kernel answers /proc/self (mountinfo, ns/mnt) for the main thread, so
//     a main thread left in the container's namespace would show the rest of the process the
//     container's mount table. A goroutine that finds itself on the main thread keeps it
//     locked, hence busy, while a second one, necessarily on another thread, does the work.
//   - The thread first leaves the filesystem context (root, cwd) it shares with the rest of
//     the process (unshare(CLONE_FS), which setns(CLONE_NEWNS) requires); the other threads
//     keep the runtime's namespace, root and cwd.
//   - A thread the runtime starts meanwhile is cloned from its template thread, never from
//     the locked one, so no new thread inherits the namespace.
//   - The work done in the namespace (attachAll) makes only direct unix.* system calls on
//     descriptors, on its own goroutine, and uses no Go runtime facility that starts threads
//     or hands work to another goroutine (os/exec, the network poller, a worker pool): such
//     work would run on another thread, in the host's namespace.
//
// TestNoOtherThreadEntersTheNamespace watches every thread of the process during and after
// the attach.
// Earlier versions re-executed the binary into the namespace from a C constructor, which
// cost a second process start (about 5 ms of the hook's 11) per container.
//
// All or nothing: any failure undoes, in reverse order, every mount attached and every mount
// point created by this invocation (also those created inside a class mount's host source),
// and the hook exits non-zero, so the runtime fails the container. Should the hook die
// half-way, the runtime still fails the container and its namespace goes away with what was
// attached. The hook never mounts in the host's namespace: trees that were not attached
// dissolve when their descriptors close. (A class mount nested below an rshared one reaches
// the host through it, like any mount made there, exactly as Bidirectional does through the
// runtime; its undo propagates the same way.)
//
// # Rootfs propagation
//
// The NRI path raises linux.rootfsPropagation (rshared for Bidirectional) because there the
// runtime binds the source from its copy inside the container's namespace, which is only a
// peer of the host's mount when the whole namespace was made rshared. The hook does not need
// that: its rshared mount is a peer of the host's mount by construction, and a mount made in
// the container below it reaches the host whatever the rootfs propagation. What matters is
// that the runtime does not change the class mounts after the hook: runc 1.5 re-applies
// linux.rootfsPropagation to / after pivot_root only when it is shared or unbindable (private
// and slave are applied before the hook runs). "rshared" keeps the relations (a private
// class mount becomes shared in a group of its own, unrelated to the host); "runbindable"
// would make every class mount private, so the hook refuses it for rslave and rshared
// classes. Operators set nothing in config.json for hook mode.
//
// # What hook mode cannot do
//
// subPath repair: runc mounts the config's mounts before any prestart hook runs, so a stale
// subPath has already been mounted (or failed) by then; only precreate and the NRI plugin see
// the spec before that. A class mount whose destination lies above a mount of the spec is
// refused for the same reason: it would hide the mount the runtime already made.
package hook
