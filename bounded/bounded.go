// Package bounded waits a bounded time for calls that may hang in the kernel: a stat, statx or
// open below a dead network filesystem cannot be interrupted, so the caller must stop waiting
// instead. A call that overruns is left to finish on its own goroutine and its result dropped.
package bounded

import (
	"fmt"
	"time"
)

// Run runs f and waits at most d for it. A call that overruns is left to finish on its own
// goroutine (a hung stat cannot be cancelled) and its result is dropped.
// A d of zero or less runs f inline, unbounded: for callers that bound a larger whole.
func Run[T any](d time.Duration, what string, f func() (T, error)) (T, error) {
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
