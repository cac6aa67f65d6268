package netmount

import (
	"time"
)

// graceIfUnusedLocked starts the grace period of a mount that has just become ready with no
// users, once the plugin has claimed the running containers' mounts (see synced): a mount
// ensured for a pod whose containers never come, or remounted at start-up for nobody, goes.
func (m *Manager) graceIfUnusedLocked(e *entry) {
	if m.synced && len(e.users) == 0 && e.graceTimer == nil {
		m.startGraceLocked(e)
	}
}

func (m *Manager) startGraceLocked(e *entry) {
	m.stopGraceLocked(e)
	if m.closed {
		return
	}
	e.graceSince = time.Now()
	m.armGraceLocked(e, m.cfg.Grace)
	m.logFor(e).WithField("grace", m.cfg.Grace).Debug("netmount: no users left: unmounting after the grace period")
}

// armGraceLocked ends e's grace period in d (from now), disarming a pending timer; its start
// (graceSince) stays.
func (m *Manager) armGraceLocked(e *entry, d time.Duration) {
	if e.graceTimer != nil {
		e.graceTimer.Stop()
	}
	e.graceGen++
	gen := e.graceGen
	e.graceTimer = time.AfterFunc(d, func() { m.graceOver(e, gen) })
}

func (m *Manager) stopGraceLocked(e *entry) {
	if e.graceTimer != nil {
		e.graceTimer.Stop()
		e.graceTimer = nil
	}
	e.graceGen++
}

func (m *Manager) graceOver(e *entry, gen int) {
	m.mu.Lock()
	if m.closed || gen != e.graceGen || len(e.users) > 0 || e.phase != mounted || m.entries[e.key] != e {
		m.mu.Unlock()
		return
	}
	e.graceTimer = nil
	m.beginUnmountLocked(e)
	m.mu.Unlock()
	m.unmount(e)
}

// beginUnmountLocked marks e as being unmounted, for the waiters to see, and counts the
// unmount (m.unmount, which the caller runs next) among the Manager's goroutines.
func (m *Manager) beginUnmountLocked(e *entry) {
	e.phase, e.since, e.wanted = unmounting, time.Now(), false
	e.broadcast()
	m.wg.Add(1)
}
