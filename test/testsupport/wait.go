package testsupport

import (
	"testing"
	"time"
)

// Eventually checks cond every interval until it holds, and fails tb once timeout has passed
// without it: timeout is a hang guard, not a measurement.
func Eventually(tb testing.TB, timeout, interval time.Duration, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(interval) {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s", what, timeout)
		}
	}
}
