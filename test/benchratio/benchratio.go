// Package benchratio measures a candidate against a baseline inside one benchmark, so the
// result is a ratio that a noisy machine cannot skew: both run in the same iterations,
// alternating which goes first, and share whatever the machine was doing at the time.
package benchratio

import (
	"math"
	"testing"
	"time"
)

// Compare runs baseline and candidate b.N times each, interleaved, and reports their mean
// times and candidate/baseline as the metric "ratio". The benchmark's own ns/op is the sum.
// It returns the ratio, 0 when the baseline took no time.
func Compare(b *testing.B, baseline, candidate func()) float64 {
	b.Helper()
	base, cand := compare(b, timed(baseline), timed(candidate))
	if base == 0 {
		return 0
	}
	return float64(cand) / float64(base)
}

// CompareTarget is Compare, then a line "<name>: ratio R, target T: PASS|MISS", which
// `make bench` prints. It never fails the benchmark: a ratio is measured, not asserted.
func CompareTarget(b *testing.B, target float64, baseline, candidate func()) {
	b.Helper()
	base, cand := compare(b, timed(baseline), timed(candidate))
	if b.N == 1 {
		return // the framework's first, one-iteration round: not a measurement
	}
	r, v := verdict(base, cand, target)
	b.Logf("%s: ratio %.3f, target %.2f: %s", b.Name(), r, target, v)
}

// timed makes f a function that returns how long it took.
func timed(f func()) func() time.Duration {
	return func() time.Duration {
		start := time.Now()
		f()
		return time.Since(start)
	}
}

// compare runs baseline and candidate b.N times each, interleaved, alternating which goes
// first, reports the mean of each and their ratio as metrics, and returns the total of each.
func compare(b *testing.B, baseline, candidate func() time.Duration) (base, cand time.Duration) {
	b.Helper()
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
	return base, cand
}

// verdict is the ratio cand/base and PASS when it is at most target, else MISS. A baseline
// that took no time measured nothing: the ratio is NaN and the verdict MISS.
func verdict(base, cand time.Duration, target float64) (float64, string) {
	if base <= 0 {
		return math.NaN(), "MISS (the baseline took no time)"
	}
	r := float64(cand) / float64(base)
	if r > target {
		return r, "MISS"
	}
	return r, "PASS"
}
