package netmount

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// Ensure starts mounting s in the background unless it is mounted or being mounted. It never
// blocks. Call it early: when a pod of a class with network mounts is created, and at start-up
// for the running pods, so that the mount is ready when the containers come.
func (m *Manager) Ensure(s netspec.Spec) {
	if err := s.Validate(); err != nil {
		m.log.WithError(err).WithField("spec", s.String()).Error("netmount: invalid network mount")
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.ensureLocked(s)
	}
}

func (m *Manager) ensureLocked(s netspec.Spec) *entry {
	e := m.entries[s.Key()]
	if e == nil {
		e = m.newEntry(s)
		m.entries[e.key] = e
	}
	e.spec = s
	if e.retired { // a mount of s's key after all, found at start-up: check it as any
		m.unretireLocked(e)
	}
	switch e.phase {
	case idle:
		m.startMountLocked(e)
	case unmounting:
		e.wanted = true
	}
	return e
}

func (m *Manager) startMountLocked(e *entry) {
	e.phase, e.attempt, e.lastErr, e.retryAt = mounting, 0, nil, time.Time{}
	e.broadcast()
	m.wg.Add(1)
	go m.mountLoop(e)
}

// mountLoop tries to mount e until it is mounted or the Manager is closed, waiting
// RetryBackoff (doubling, at most MaxRetryBackoff) between attempts.
func (m *Manager) mountLoop(e *entry) {
	m.retryLoop(e, retry{
		maxBackoff: MaxRetryBackoff,
		begin:      func() {},
		try:        func(int) error { return m.mountOnce(e) },
		succeeded: func(attempt int) func() {
			log := m.logFor(e).WithFields(logrus.Fields{"attempt": attempt, "took": e.mountedAt.Sub(e.since).Round(time.Millisecond)})
			return func() { log.Info("netmount: mounted") }
		},
		failed: func(attempt int, err error, retryIn time.Duration) func() {
			e.lastErr = err
			log := m.logFor(e).WithError(err).WithFields(logrus.Fields{"attempt": attempt, "retry_in": retryIn})
			return func() { log.Warn("netmount: mount failed") }
		},
	})
}

// prepareMount is what every mount attempt (first mount or heal) starts with: the preflight,
// then the key's lock, which a hook (EnsureMounted) mounting the same spec takes too.
func (m *Manager) prepareMount(e *entry) (unlock func(), err error) {
	if err := m.sys.preflight(e.spec); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(m.ctx, m.cfg.MountTimeout)
	defer cancel()
	return lockKey(lctx, filepath.Dir(m.stateDir), e.key)
}

// mountOnce makes one attempt: preflight, then mount(8) in the mount's scope, bounded by
// MountTimeout. A live mount already at the host path (an agent died between mounting and
// writing the state) is taken over.
func (m *Manager) mountOnce(e *entry) error {
	unlock, err := m.prepareMount(e)
	if err != nil {
		return err
	}
	defer unlock()
	already, err := m.sys.isMounted(e.hostPath)
	if err != nil {
		return err
	}
	if already {
		if err := m.probe(e); err == nil {
			m.logFor(e).Info("netmount: a live mount without state is at the host path: taking it over")
			return m.saveState(e)
		}
	}
	if err := os.Mkdir(e.hostPath, 0o700); errors.Is(err, fs.ErrExist) {
		err = os.Chmod(e.hostPath, 0o700) // an earlier agent made it 0755; nothing is mounted on it
	}
	if err != nil {
		return err
	}
	cmdSpec, err := writeSecretFile(m.secretsDir, e.spec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.MountTimeout)
	defer cancel()
	if err := m.sys.mount(ctx, cmdSpec, e.unit, e.hostPath, m.cfg.MountTimeout); err != nil {
		m.cleanFailedAttempt(e)
		return redactError(e.spec, err)
	}
	return m.saveState(e)
}

// cleanFailedAttempt kills what a failed attempt left in the mount's scope, unless the
// attempt mounted after all, and removes the scope.
func (m *Manager) cleanFailedAttempt(e *entry) {
	if mounted, err := m.sys.isMounted(e.hostPath); err != nil || mounted {
		return
	}
	if err := m.sys.killScope(e.unit); err != nil {
		m.logFor(e).WithError(err).Warn("netmount: cannot kill what the failed mount attempt left running")
	}
	var err error
	for range 20 {
		if err = m.sys.removeScope(e.unit); err == nil {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	m.logFor(e).WithError(err).Debug("netmount: scope of the failed mount attempt not removed")
}

func (m *Manager) saveState(e *entry) error {
	if err := writeState(m.stateDir, e.dir, newState(e.spec, e.hostPath)); err != nil {
		// The mount is live and usable; only its adoption after a restart is at stake.
		m.logFor(e).WithError(err).Error("netmount: cannot write the mount's state: a restarted agent will not adopt it")
	}
	return nil
}
