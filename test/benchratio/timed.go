package benchratio

import (
	"fmt"
	"testing"
	"time"
)

// CompareTimed is Compare for work that times itself: baseline and candidate each return how
// long their measured part took (leaving out set-up and clean-up of their own), interleaved
// as in Compare. It reports the same metrics and returns the mean of each.
func CompareTimed(b *testing.B, baseline, candidate func() time.Duration) (meanBase, meanCand time.Duration) {
	b.Helper()
	base, cand := compare(b, baseline, candidate)
	return base / time.Duration(b.N), cand / time.Duration(b.N)
}

// Verdict is one line for the bench output: the ratio of cand to base, its target, and PASS
// or MISS (MISS too when base is 0: nothing was measured). The line holds "ratio", so `make
// bench` shows it.
func Verdict(what string, base, cand time.Duration, target float64) string {
	r, v := verdict(base, cand, target)
	return fmt.Sprintf("%s: ratio %.3f (candidate %s / baseline %s), target <= %.2f: %s", what, r, cand, base, target, v)
}
