// Package benchratio measures a candidate against a baseline inside one benchmark, so the
// result is a ratio that a noisy machine cannot skew: both run in the same iterations,
// alternating which goes first, and share whatever the machine was doing at the time.
package benchratio

import (
	"testing"
	"time"
)

// Compare runs baseline and candidate b.N times each, interleaved, and reports their mean
// times and candidate/baseline as the metric "ratio". The benchmark's own ns/op is the sum.
func Compare(b *testing.B, baseline, candidate func()) {
	b.Helper()
	var base, cand time.Duration
	timed := func(f func()) time.Duration {
		start := time.Now()
		f()
		return time.Since(start)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			base += timed(baseline)
			cand += timed(candidate)
		} else {
			cand += timed(candidate)
			base += timed(baseline)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(base.Nanoseconds())/n, "baseline-ns/op")
	b.ReportMetric(float64(cand.Nanoseconds())/n, "candidate-ns/op")
	if base > 0 {
		b.ReportMetric(float64(cand)/float64(base), "ratio")
	}
}
