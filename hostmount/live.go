package hostmount

import (
	"fmt"
	"io/fs"
	"os"
	"time"
)

// Live reads the running host. Its calls can hang on a dead network filesystem; Checker
// bounds them.
type Live struct{}

var _ Inspector = Live{}

// Stat stats path, following symlinks as the runtime's bind mount will.
func (Live) Stat(path string) (fs.FileInfo, error) { return os.Stat(path) }

// MountPoints finds the mount holding each path by its mount ID, which is exact even where
// mounts are stacked on one path: with statmount(2) where the kernel has it (Linux >= 6.8),
// else from one read of mountinfo for all paths (mount IDs from statx, Linux >= 5.8).
func (Live) MountPoints(paths []string) ([]MountPoint, error) {
	ms, err := MountsOfPaths(paths)
	if err != nil {
		return nil, err
	}
	mps := make([]MountPoint, len(ms))
	for i, m := range ms {
		mps[i] = MountPoint{ID: m.MountinfoID, Path: m.Point, Shared: m.Shared, Slave: m.Slave}
	}
	return mps, nil
}

// Bounded runs f and waits at most d for it. A call that overruns is left to finish on its own
// goroutine (a hung stat cannot be cancelled) and its result is dropped.
// A d of zero or less runs f inline, unbounded: for callers that bound a larger whole.
func Bounded[T any](d time.Duration, what string, f func() (T, error)) (T, error) {
	if d <= 0 {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		var zero T
		return zero, fmt.Errorf("%s: no answer within %s (is a network filesystem on the path dead?)", what, d)
	}
}
