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
func Compare(b *testing.B, baseline, candidate func()) float64 {
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
	if base == 0 {
		return 0
	}
	r := float64(cand) / float64(base)
	b.ReportMetric(r, "ratio")
	return r
}

// CompareTarget is Compare, then a line "<name>: ratio R, target T: PASS|MISS", which
// `make bench` prints. It never fails the benchmark: a ratio is measured, not asserted.
func CompareTarget(b *testing.B, target float64, baseline, candidate func()) {
	b.Helper()
	r := Compare(b, baseline, candidate)
	if b.N == 1 {
		return // the framework's first, one-iteration round: not a measurement
	}
	verdict := "PASS"
	if r > target {
		verdict = "MISS"
	}
	b.Logf("%s: ratio %.3f, target %.2f: %s", b.Name(), r, target, verdict)
}
