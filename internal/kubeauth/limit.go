package kubeauth

import "time"

// reviewLimit bounds the reviews of one kind of token: at most inFlight at once and, with
// every > 0, a token bucket of burst reviews refilled by one each every. Its caller holds the
// guard's lock; the clock is the guard's (tests freeze it).
type reviewLimit struct {
	inFlight, running int
	burst             float64
	every             time.Duration
	tokens            float64
	last              time.Time
}

func newReviewLimit(inFlight, burst int, every time.Duration) *reviewLimit {
	return &reviewLimit{inFlight: inFlight, burst: float64(burst), every: every, tokens: float64(burst)}
}

// take says whether a review may start now, and counts it as running if so.
func (l *reviewLimit) take(now time.Time) bool {
	if l.running >= l.inFlight {
		return false
	}
	if l.every > 0 {
		if !l.last.IsZero() && now.After(l.last) {
			l.tokens = min(l.burst, l.tokens+float64(now.Sub(l.last))/float64(l.every))
		}
		l.last = now
		if l.tokens < 1 {
			return false
		}
		l.tokens--
	}
	l.running++
	return true
}

// done ends a review take let start.
func (l *reviewLimit) done() { l.running-- }
