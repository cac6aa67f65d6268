// Package nsenter moves a re-executed mountkeeper into a container's mount namespace before
// the Go runtime starts. Every binary that links it (package hook imports it) carries the
// constructor, which does nothing unless EnvVar is set. The main package must hand over to
// hook.ChildMain when Entered reports true, before it looks at its arguments:
//
//	func init() {
//		if nsenter.Entered() {
//			os.Exit(hook.ChildMain(os.Stdin, os.Stderr))
//		}
//	}
//
// # Why a C constructor
//
// setns(2) with CLONE_NEWNS fails with EINVAL for a thread whose filesystem information
// (root, cwd: fs_struct) is shared with another thread, and a Go program is multi-threaded
// from its first instruction of Go code (the runtime starts sysmon and GC workers before main
// or any init runs), all threads sharing one fs_struct. runtime.LockOSThread alone does not
// change that. Code that runs before the Go runtime does not have the problem, and a
// constructor (__attribute__((constructor))) in a cgo preamble is such code: the dynamic
// loader, or libc in a static binary, runs it before the runtime's entry point, while the
// process has a single thread. runc's own nsenter works the same way.
//
// The alternatives were weighed:
//   - unshare(CLONE_FS) and then setns on a goroutine locked to its OS thread (never unlocked,
//     so the runtime retires the thread). The kernel allows it and it saves the second process
//     (measured on a 2-core VM: about 3 ms per container, runc run of `true` with the hook at
//     about 1.18 of runc run without it, against about 1.25 with the re-exec). But then the
//     whole namespace side must stay on that one goroutine: anything that hands work to
//     another goroutine or thread (os/exec, the poller, a library's worker) silently acts in
//     the runtime's namespace, which is the host's, and the failure mode is a mount on the
//     host. It also leans on the Go runtime creating new threads from its template thread
//     while one is locked, an implementation detail. A helper process whose every thread is
//     in the container's namespace cannot make that mistake.
//   - nsenter(1) from util-linux: one more exec per container as well, a dependency that may
//     be missing or differ between hosts, and errors that are not ours to word.
//   - mounting from the host namespace through /proc/<pid>/root: move_mount refuses a target
//     outside the caller's namespace, and path walks through another namespace's root are
//     the classic symlink race.
//
// So mountkeeper clones each source tree on the host with open_tree(OPEN_TREE_CLONE), sets
// its propagation and flags while it is detached, then re-executes itself with those trees as
// inherited file descriptors and this package's environment variable naming an open
// /proc/<pid>/ns/mnt descriptor. The constructor calls setns on it and the Go code that runs
// afterwards only attaches the trees (hook.ChildMain).
//
// The descriptor is opened by the parent, not named by a pid: the parent checks it is another
// namespace than its own, and the child cannot be pointed at a recycled pid between the two.
//
// # Errors
//
// When the variable is set but setns fails, the constructor writes one line to stderr and
// exits with ExitCode, before any Go code runs; the parent reports that line. Built without
// cgo (CGO_ENABLED=0) the package compiles but Available reports false, and mountkeeper
// refuses the prestart/createRuntime stages with a message that says so.
package nsenter

// EnvVar names the environment variable that holds the descriptor number of the mount
// namespace to enter. Keep in sync with MK_NSENTER_ENV in nsenter.go.
const EnvVar = "_MOUNTKEEPER_NSENTER_MNT_FD"

// ExitCode is the exit status of a child whose setns failed. Keep in sync with
// MK_NSENTER_EXIT in nsenter.go.
const ExitCode = 97

// HoldUserNSEnv, when set, makes the constructor a placeholder that waits for its stdin to
// close and exits, without starting the Go runtime: started with CLONE_NEWUSER, it holds a
// user namespace open for package idmap to probe filesystems with.
const HoldUserNSEnv = "_MOUNTKEEPER_HOLD_USERNS"
