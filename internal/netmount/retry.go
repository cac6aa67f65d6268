package netmount

import (
	"time"
)

// retry is one kind of retried work on an entry, for retryLoop. begin, succeeded and failed
// run with m.mu held; the last two return the log line to write once it is released.
type retry struct {
	maxBackoff time.Duration
	begin      func()                  // before each attempt (the entry's phase)
	try        func(attempt int) error // the attempt, without the lock
	succeeded  func(attempt int) func()
	failed     func(attempt int, err error, retryIn time.Duration) func() // sets e.lastErr
	// giveUp, if set, is asked before each attempt and after each failed one: true ends the
	// loop there (giveUp has handed e to what follows).
	giveUp func() bool
}

// retryLoop runs r.try on e until it succeeds or the Manager is closed, waiting RetryBackoff
// (doubling, at most r.maxBackoff; cut short by e.retryNow) between attempts, and keeps e's
// attempt, times and phase for Status and Acquire's waiters (broadcast after every change).
func (m *Manager) retryLoop(e *entry, r retry) {
	defer m.wg.Done()
	backoff := m.cfg.RetryBackoff
	for {
		m.mu.Lock()
		if m.closed || r.giveUp != nil && r.giveUp() {
			m.mu.Unlock()
			return
		}
		r.begin()
		// A claim may have ended the wait just as it ended on its own: its token must not
		// cut the next wait short (the next backoff, or a heal's against a dead server).
		select {
		case <-e.retryNow:
		default:
		}
		e.attempt++
		e.since, e.retryAt = time.Now(), time.Time{}
		e.broadcast()
		attempt := e.attempt
		m.mu.Unlock()

		err := r.try(attempt)

		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return
		}
		if err == nil {
			e.phase, e.lastErr, e.mountedAt = mounted, nil, time.Now()
			logLine := r.succeeded(attempt)
			m.graceIfUnusedLocked(e)
			e.broadcast()
			m.mu.Unlock()
			logLine()
			return
		}
		if r.giveUp != nil && r.giveUp() {
			m.mu.Unlock()
			return
		}
		logLine := r.failed(attempt, err, backoff)
		e.retryAt = time.Now().Add(backoff)
		e.broadcast()
		m.mu.Unlock()
		logLine()

		select {
		case <-m.ctx.Done():
			return
		case <-time.After(backoff):
		case <-e.retryNow:
		}
		backoff = min(2*backoff, r.maxBackoff)
	}
}
