package netmount

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// Acquire records user (a container ID) as one of the users of s and returns the host path of
// the mount, if s is mounted. Otherwise it answers "<spec>: not ready: ..." (the attempt under
// way and since when, or the last error) while the mount goes on in the background, so that
// the kubelet's retry succeeds; it waits only for a mount's first attempt (or the check of a
// mount found at start-up, or the attempt it began itself once a missing helper was installed:
// rearm), and only until FirstWait after it began or ctx is done: a server that does not
// answer costs one short wait, not one per container. The runtime creates every container of
// the node under one lock while its plugin decides (see FirstWait).
func (m *Manager) Acquire(ctx context.Context, s netspec.Spec, user string) (string, error) {
	if err := s.Validate(); err != nil {
		return "", fmt.Errorf("%s: %w", s, err)
	}
	rearmTried := false // once per call: a helper still missing would otherwise be looked for again and again
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return "", fmt.Errorf("%s: not ready: the mount manager is closed", s)
		}
		e := m.ensureLocked(s)
		if e.phase == mounted {
			e.users[user] = struct{}{}
			m.stopGraceLocked(e)
			path := e.hostPath
			m.mu.Unlock()
			return path, nil
		}
		until := m.waitUntilLocked(e)
		if !rearmTried && !time.Now().Before(until) && ctx.Err() == nil && rearmable(e) {
			rearmTried = true
			m.mu.Unlock()
			m.rearm(e)
			continue // e may have changed meanwhile: look again
		}
		if !time.Now().Before(until) || ctx.Err() != nil {
			err := m.notReadyLocked(e)
			m.mu.Unlock()
			return "", err
		}
		changed := e.changed
		m.mu.Unlock()
		timer := time.NewTimer(time.Until(until))
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-changed:
		}
		timer.Stop()
	}
}

// waitUntilLocked is until when Acquire may wait for e to be mounted: FirstWait after an
// attempt with no failure before it began (the first, or the one a claim began once a missing
// helper was installed: rearm), or the check of a mount found at start-up; never after a
// failed attempt, a death, or during an unmount (the zero time).
func (m *Manager) waitUntilLocked(e *entry) time.Time {
	switch {
	case e.phase == mounting && e.attempt == 0:
		return time.Now().Add(m.cfg.FirstWait) // just started: mountLoop begins attempt 1 at once
	case e.phase == mounting && e.lastErr == nil, e.phase == checking:
		return e.since.Add(m.cfg.FirstWait)
	}
	return time.Time{}
}

// rearmable says whether e's last mount attempt failed its preflight (the node lacked a
// helper) and no other attempt has failed since: a claim then looks whether the helper is
// there now (rearm).
func rearmable(e *entry) bool {
	var pe *PreflightError
	return e.phase == mounting && errors.As(e.lastErr, &pe)
}

// rearm acts on a preflight, which e's last attempt failed, passing now: the node's operator
// has installed the client, and the container that asked is the first to get the mount, not
// one created after a backoff of up to MaxRetryBackoff. The preflight's error is forgotten, so
// the attempt is waited for as a first one (waitUntilLocked), and a refusal meanwhile says it
// is under way, not that the client is missing. If e waits between attempts, the next begins
// at once, its clock from now; if one is under way (the wait ended on its own meanwhile, its
// own preflight after this one's or about with it), that one is waited for. An attempt that
// ended meanwhile decides alone: mounted, or failed for another reason, e is not rearmable
// any more. The preflight runs without m.mu (it reads files); callers do not hold it.
func (m *Manager) rearm(e *entry) {
	err := m.sys.preflight(e.spec)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil || m.closed || !rearmable(e) {
		return // still missing, or the loop moved on meanwhile
	}
	e.lastErr = nil
	if !e.retryAt.IsZero() {
		e.since = time.Now()
		select {
		case e.retryNow <- struct{}{}:
		default:
		}
	}
	m.log.WithField("spec", e.spec.String()).Info("netmount: what the last mount attempt lacked is installed now: mounting again at once")
}

// Hold records user as using s without waiting for the mount, and starts mounting s if it is
// neither mounted nor being mounted. It is for containers that already run when the agent
// starts: their bind was made earlier, and a mount still being checked or re-mounted must not
// reach its grace period while they use it. It never blocks.
func (m *Manager) Hold(s netspec.Spec, user string) {
	if err := s.Validate(); err != nil {
		m.log.WithError(err).WithField("spec", s.String()).Error("netmount: invalid network mount")
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	e := m.ensureLocked(s)
	e.users[user] = struct{}{}
	m.stopGraceLocked(e)
}

func (m *Manager) notReadyLocked(e *entry) error {
	ago := func(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }
	switch {
	case e.phase == mounting && e.lastErr != nil && !e.retryAt.IsZero():
		return fmt.Errorf("%s: not ready: last error: %w (attempt %d; next attempt in %s)",
			e.spec, e.lastErr, e.attempt, time.Until(e.retryAt).Round(time.Millisecond))
	case e.phase == mounting && e.lastErr != nil:
		return fmt.Errorf("%s: not ready: last error: %w (attempt %d under way since %s)",
			e.spec, e.lastErr, e.attempt, ago(e.since))
	case e.phase == mounting:
		var hint string
		if time.Since(e.since) >= m.cfg.FirstWait {
			hint = fmt.Sprintf(": %s has not answered yet: check that it is up and answers from this node; "+
				"the mount goes on in the background, and a container created once it is mounted gets it", cmp.Or(serverOf(e.spec), "the server"))
		}
		return fmt.Errorf("%s: not ready: still mounting (attempt %d, started %s ago, at %s)%s",
			e.spec, e.attempt, ago(e.since), e.since.Format(time.RFC3339), hint)
	case e.phase == checking:
		return fmt.Errorf("%s: not ready: checking the mount found at start-up (since %s)", e.spec, ago(e.since))
	case e.phase == unmounting:
		return fmt.Errorf("%s: not ready: being unmounted after its grace period; it will be mounted again", e.spec)
	case e.phase == dead || e.phase == recovering:
		var server string
		if s := serverOf(e.spec); s != "" {
			server = s + "; "
		}
		return fmt.Errorf("%s: not ready: %w (%srecovery attempt %d, dead since %s)",
			e.spec, e.lastErr, server, e.attempt, ago(e.heal.deadSince))
	}
	return fmt.Errorf("%s: not ready (%s)", e.spec, e.phase)
}

// serverOf names the server of s for a message, "the server HOST:PORT"; "" where s does not
// tell.
func serverOf(s netspec.Spec) string {
	if addr, err := s.ServerAddress(); err == nil {
		return "the server " + addr
	}
	return ""
}

// Release drops user from every mount it uses. A mount left without users is unmounted after
// Grace, unless it is acquired again meanwhile.
func (m *Manager) Release(user string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if _, ok := e.users[user]; !ok {
			continue
		}
		delete(e.users, user)
		switch {
		case len(e.users) > 0:
		case e.phase == mounted:
			m.startGraceLocked(e)
		case m.synced && e.heal.stopAttempt != nil:
			// A dead mount being replaced: the heal unmounts it instead, once the attempt
			// under way ends (unmountUnusedDeadLocked).
			e.heal.stopAttempt()
		}
	}
}

// ReleaseUnused starts the grace period of every mount that has no user: mounts adopted at
// start-up or ensured for a pod but never acquired. The plugin calls it once it has acquired
// the mounts of all running containers after a start, and may call it when a pod goes away.
func (m *Manager) ReleaseUnused() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.synced = true
	for _, e := range m.entries {
		if len(e.users) == 0 && e.phase == mounted && e.graceTimer == nil {
			m.startGraceLocked(e)
		}
	}
}
