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
	var base, cand time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			base += baseline()
			cand += candidate()
		} else {
			cand += candidate()
			base += baseline()
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(base.Nanoseconds())/n, "baseline-ns/op")
	b.ReportMetric(float64(cand.Nanoseconds())/n, "candidate-ns/op")
	if base > 0 {
		b.ReportMetric(float64(cand)/float64(base), "ratio")
	}
	return base / time.Duration(b.N), cand / time.Duration(b.N)
}

// Verdict is one line for the bench output: the ratio of cand to base, its target, and PASS
// or MISS. The line holds "ratio", so `make bench` shows it.
func Verdict(what string, base, cand time.Duration, target float64) string {
	r := float64(cand) / float64(base)
	v := "PASS"
	if r > target {
		v = "MISS"
	}
	return fmt.Sprintf("%s: ratio %.3f (candidate %s / baseline %s), target <= %.2f: %s", what, r, cand, base, target, v)
}
