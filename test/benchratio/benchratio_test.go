package benchratio

import (
	"strings"
	"testing"
	"time"
)

// TestVerdict: PASS at or below the target, MISS above it, and MISS (not a division by zero)
// when the baseline took no time.
func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		base, cand time.Duration
		want       string
	}{
		{100, 105, "ratio 1.050 (candidate 105ns / baseline 100ns), target <= 1.05: PASS"},
		{100, 106, "ratio 1.060 (candidate 106ns / baseline 100ns), target <= 1.05: MISS"},
		{0, 5, "ratio NaN (candidate 5ns / baseline 0s), target <= 1.05: MISS (the baseline took no time)"},
	} {
		if got := Verdict("x", c.base, c.cand, 1.05); got != "x: "+c.want {
			t.Errorf("Verdict(%v, %v) = %q, want %q", c.base, c.cand, got, "x: "+c.want)
		}
	}
}

// TestCompare: both functions run b.N times and the ratio is that of their times (about 3;
// only a lower bound, which a loaded machine cannot break).
func TestCompare(t *testing.T) {
	var nBase, nCand int
	var r float64
	res := testing.Benchmark(func(b *testing.B) {
		nBase, nCand = 0, 0
		r = Compare(b, func() { nBase++; time.Sleep(time.Millisecond) }, func() { nCand++; time.Sleep(3 * time.Millisecond) })
	})
	if nBase != res.N || nCand != res.N {
		t.Errorf("baseline ran %d times, candidate %d, want b.N = %d each", nBase, nCand, res.N)
	}
	if r < 1.2 || !strings.Contains(res.String(), "ratio") {
		t.Errorf("ratio %.2f (want about 3), result %s", r, res)
	}
}
