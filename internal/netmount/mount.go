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
	if e.retired { // a mount of s's key after all, found at start-up: check it as any
		// Its spec was the state's, redacted. Any other entry of the key has s already, and
		// its mount attempts read it without m.mu.
		e.spec = s
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
// then the key's lock, which a hook (EnsureMounted) mounting the same spec takes too, then
// whether something is mounted at e's host path (a hook may have mounted it meanwhile).
func (m *Manager) prepareMount(e *entry) (unlock func(), mounted bool, err error) {
	if err := m.sys.preflight(e.spec); err != nil {
		return nil, false, err
	}
	lctx, cancel := context.WithTimeout(m.ctx, m.config().MountTimeout)
	defer cancel()
	unlock, err = lockKey(lctx, filepath.Dir(m.stateDir), e.key)
	if err != nil {
		return nil, false, err
	}
	if mounted, err = m.sys.isMounted(e.hostPath); err != nil {
		unlock()
		return nil, false, err
	}
	return unlock, mounted, nil
}

// mountOnce makes one attempt: preflight, then mount(8) in the mount's scope, bounded by
// MountTimeout. A live mount already at the host path (an agent died between mounting and
// writing the state) is taken over.
func (m *Manager) mountOnce(e *entry) error {
	unlock, already, err := m.prepareMount(e)
	if err != nil {
		return err
	}
	defer unlock()
	if already {
		if err := m.keepOrUnmount(e); err == nil {
			m.logFor(e).Info("netmount: a live mount without state is at the host path: taking it over")
			return m.saveState(e)
		}
	}
	if err := makeMountPoint(e.hostPath); err != nil {
		return err
	}
	cleared, err := attemptMount(m.ctx, m.sys, m.config(), m.secretsDir, e.spec, e.unit, e.hostPath)
	if err != nil {
		if cleared {
			m.removeFailedScope(e)
		}
		return err
	}
	return m.saveState(e)
}

// makeMountPoint makes path a directory of root's alone (0700) to mount on: an earlier agent
// made them 0755. Nothing is mounted on it.
func makeMountPoint(path string) error {
	err := os.Mkdir(path, 0o700)
	if errors.Is(err, fs.ErrExist) {
		err = os.Chmod(path, 0o700)
	}
	return err
}

// attemptMount is one mount of s at target, its helper run in the scope of unit: what every
// mount makes, a first mount (mountOnce), a heal's new one (replaceInPlace) and a hook's
// (EnsureMounted). The secret goes to a root-only file the helper reads (writeSecretFile),
// mount(8) is bounded by c.MountTimeout (past it the helper's process group is killed:
// system.mount), and the error is redacted. After a failure that left nothing mounted at
// target, what the attempt left running in the scope (a FUSE daemon that detached, then hung)
// is killed and cleared is true: the scope may then be removed.
func attemptMount(ctx context.Context, sys system, c Config, secretsDir string, s netspec.Spec, unit, target string) (cleared bool, err error) {
	cmdSpec, err := writeSecretFile(secretsDir, s)
	if err != nil {
		return false, err
	}
	mctx, cancel := context.WithTimeout(ctx, c.MountTimeout)
	defer cancel()
	ensureStatd(mctx, sys, c.Log, s)
	err = sys.mount(mctx, cmdSpec, unit, target, c.MountTimeout)
	if err == nil {
		removeKernelClientScope(sys, c.Log, s, unit)
		return false, nil
	}
	if mounted, ierr := sys.isMounted(target); ierr == nil && !mounted {
		if kerr := sys.killScope(unit); kerr != nil {
			c.Log.WithError(kerr).WithFields(logrus.Fields{"mount": s.Key(), "spec": s.String(), "scope": unit}).
				Warn("netmount: cannot kill what the failed mount attempt left running")
		}
		cleared = true
	}
	return cleared, redactError(s, explainMountError(s, err))
}

// removeFailedScope removes the scope of e's failed attempt, cleared by attemptMount: its
// processes may take a moment to go.
func (m *Manager) removeFailedScope(e *entry) {
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

// kernelClient says whether mounts of type typ are served by the kernel alone, with no daemon
// left in the mount's scope once the helper exits (NFS, CIFS, CephFS; FUSE filesystems keep
// their daemon).
func kernelClient(typ string) bool {
	ft, err := netspec.Lookup(typ)
	return err == nil && !ft.FUSE
}

// removeKernelClientScope removes the scope of a kernel client's mount (kernelClient) once its
// helper has exited: the kernel holds the mount and nothing runs in the scope, which would
// otherwise be left empty until the unmount, or for good in hook mode, which never unmounts.
// Whatever the helper left running (rpc.statd where ensureStatd could not start it) keeps
// the scope until the unmount.
func removeKernelClientScope(sys system, log *logrus.Logger, s netspec.Spec, unit string) {
	if !kernelClient(s.Type) {
		return
	}
	if err := sys.removeScope(unit); err != nil {
		log.WithError(err).WithFields(logrus.Fields{"mount": s.Key(), "spec": s.String(), "scope": unit}).
			Debug("netmount: the scope of a kernel mount still has processes: kept until the unmount")
	}
}
