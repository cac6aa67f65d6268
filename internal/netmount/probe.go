package netmount

import (
	"context"
	"errors"
	"fmt"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
)

// probe checks that the mount at e.hostPath answers; it unmounts it lazily if it does not. A
// timeout is not an error.
func (m *Manager) probe(e *entry) error {
	err := m.sys.probe(e.hostPath)
	if err == nil || errors.Is(err, bounded.ErrNoAnswer) {
		if err != nil {
			m.logFor(e).WithError(err).Warn("netmount: mount does not answer; keeping it")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.UnmountTimeout)
	defer cancel()
	if uerr := m.sys.unmount(ctx, e.hostPath, true); uerr != nil {
		return fmt.Errorf("%w; and its lazy unmount failed: %v", err, uerr)
	}
	return err
}

// health is nil if e answers, or why it is dead: its daemon gone, an error (ENOTCONN), or
// no answer within ProbeTimeout (see system.probe).
func (m *Manager) health(e *entry) error {
	h := m.sys.(healer)
	if h.daemonGone(e.spec, e.unit) {
		return fmt.Errorf("its daemon is gone (no process in scope %s)", m.scopeName(e.unit))
	}
	return m.sys.probe(e.hostPath)
}

// liveMount says whether a filesystem that answers is mounted at hostPath. One that does not
// answer in time counts as live (its server may be slow; mounting again would not help). A
// dead one (ENOTCONN) is unmounted lazily if replace is set, and reported as not live.
func liveMount(ctx context.Context, sys system, hostPath string, replace bool) (bool, error) {
	mounted, err := sys.isMounted(hostPath)
	if err != nil || !mounted {
		return false, err
	}
	perr := sys.probe(hostPath)
	if perr == nil || errors.Is(perr, bounded.ErrNoAnswer) {
		return true, nil
	}
	if !replace {
		return false, nil
	}
	uctx, cancel := context.WithTimeout(ctx, DefaultUnmountTimeout)
	defer cancel()
	if err := sys.unmount(uctx, hostPath, true); err != nil {
		return false, fmt.Errorf("the mount at %s is dead (%v) and its lazy unmount failed: %w", hostPath, perr, err)
	}
	return false, nil
}
