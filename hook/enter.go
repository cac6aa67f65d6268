package hook

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// inMountNamespace runs f inside the mount namespace ns, on an OS thread of its own that no
// other goroutine ever uses, and returns f's error. See the package documentation for why this
// is safe; in short:
//
//   - f runs on a new goroutine locked to its thread (runtime.LockOSThread) and never
//     unlocked, so while it runs no other goroutine is scheduled on that thread, and when it
//     returns the Go runtime ends the thread instead of reusing it (Go >= 1.10).
//   - Never the main thread: the runtime cannot end it (it parks it for good instead), and
//     the kernel answers /proc/self (mountinfo, ns/mnt) for the main thread, so a main
//     thread left in the container's namespace would show the rest of the process the
//     container's mount table. A goroutine that finds itself there keeps the main thread
//     locked, hence busy, while a second one, necessarily on another thread, does the work.
//   - The thread first leaves the filesystem context (root, cwd) it shares with the rest of
//     the process (unshare(CLONE_FS)); setns(CLONE_NEWNS) refuses a thread that shares it.
//     The other threads keep the runtime's namespace, root and cwd.
//   - A thread the runtime starts while a locked goroutine runs is cloned from its template
//     thread, never from the locked thread, so no new thread inherits the namespace.
//   - f must do all its work on its own goroutine with direct system calls: nothing it calls
//     may hand work to another goroutine (os/exec, network I/O, a worker pool), which would
//     act in the runtime's namespace. attachAll only calls openat2, mkdirat, fstat, fstatfs,
//     move_mount and umount.
//
// A panic in f is returned as an error; the thread still ends with the goroutine.
func inMountNamespace(ns *os.File, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked (but on the main thread): the thread must end with this goroutine
		if unix.Gettid() == unix.Getpid() {
			done <- inMountNamespace(ns, f)
			runtime.UnlockOSThread() // it never left the runtime's namespace
			return
		}
		done <- func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic in the container's mount namespace: %v", r)
				}
			}()
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				return fmt.Errorf("enter the container's mount namespace %s: unshare(CLONE_FS): %w", ns.Name(), err)
			}
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("enter the container's mount namespace %s: setns(CLONE_NEWNS): %w", ns.Name(), err)
			}
			return f()
		}()
	}()
	return <-done
}
