package hook

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// inMountNamespace runs f inside the mount namespace ns, on an OS thread of its own that no
// other goroutine ever uses, and returns f's error. Why that is safe, and what f may do (only
// direct unix.* calls on descriptors, no Go runtime facility that starts threads), is stated
// once, in the package documentation (doc.go, "Why no other code ever runs in the
// container's namespace").
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
