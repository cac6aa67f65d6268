package netmount

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// One probe, and one rule for what its answer means, for every path that asks whether a
// mount is usable: the prober of the held mounts and a heal attempt (heal.go), the check of a
// mount found at start-up (adopt.go), the takeover of a live mount without state (mount.go), a
// hook's EnsureMounted (ensure.go), and the new mount a heal puts in place (replaceInPlace).

// probeMount asks whether the filesystem of s mounted at path, its daemon in the scope of
// unit, answers: nil if it does; else why not: its daemon is gone (where the system can tell:
// healer.daemonGone), an error (ENOTCONN), or no answer within ProbeTimeout (an error wrapping
// bounded.ErrNoAnswer: the stat is left behind, and while it hangs no other probe of the
// path starts, see package bounded).
func probeMount(sys system, s netspec.Spec, unit, path string) error {
	if h, ok := sys.(healer); ok {
		if err := h.daemonGone(s, unit); err != nil {
			return err
		}
	}
	return staleCause(sys.probe(path))
}

// unusable is the rule for a probe's answer (probeMount). A mount that answers is used, one
// that fails is dead. One that does not answer in time is dead only where what replaces it
// is probed in turn before it is used (replaceable: a heal, on a system that heals): a mount
// is never traded for one that does not answer either, and a hung one is replaced as soon as
// its server answers again. Where the only other course is to unmount it and mount again
// unprobed (a hook, the takeover of a live mount without state, a system that cannot heal),
// it is kept: its server may be slow, and mounting again would not make it answer.
func unusable(probeErr error, replaceable bool) bool {
	return probeErr != nil && (replaceable || !errors.Is(probeErr, bounded.ErrNoAnswer))
}

// unmountUnusable unmounts lazily a mount that a probe found unusable (cause), within
// timeout, so that it can be mounted again at its path.
func unmountUnusable(ctx context.Context, sys system, path string, cause error, timeout time.Duration) error {
	uctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := sys.unmount(uctx, path, true); err != nil {
		return fmt.Errorf("the mount at %s is dead (%v) and its lazy unmount failed: %w", path, cause, err)
	}
	return nil
}

// health is nil if e answers, or why it is dead (probeMount).
func (m *Manager) health(e *entry) error { return probeMount(m.sys, e.spec, e.unit, e.hostPath) }

// keepOrUnmount probes e, whose mount is not replaced in place (see unusable): nil if it is
// usable (one that does not answer in time is kept, with a warning); else it is unmounted
// lazily and the cause returned.
func (m *Manager) keepOrUnmount(e *entry) error {
	err := m.health(e)
	if !unusable(err, false) {
		if err != nil {
			m.logFor(e).WithError(err).Warn("netmount: mount does not answer; keeping it")
		}
		return nil
	}
	if uerr := unmountUnusable(m.ctx, m.sys, e.hostPath, err, m.cfg.UnmountTimeout); uerr != nil {
		return uerr
	}
	return err
}

// liveMount says whether a usable filesystem is mounted at hostPath (probeMount, unusable:
// one that does not answer in time counts as live). A dead one is unmounted lazily if
// replace is set, and reported as not live.
func liveMount(ctx context.Context, sys system, c Config, s netspec.Spec, hostPath string, replace bool) (bool, error) {
	mounted, err := sys.isMounted(hostPath)
	if err != nil || !mounted {
		return false, err
	}
	perr := probeMount(sys, s, unitFor(s.Key()), hostPath)
	if !unusable(perr, false) {
		return true, nil
	}
	if !replace {
		return false, nil
	}
	return false, unmountUnusable(ctx, sys, hostPath, perr, c.UnmountTimeout)
}

// staleCause says what a probe's ESTALE means. A kernel client (NFS) has no daemon to die: a
// server whose export was removed and made anew (a failover, a re-created export) answers
// ESTALE for the file handle of the mount's root for good, so that mount is dead and only a
// new mount, which looks the root up afresh, reads the export again.
func staleCause(probeErr error) error {
	if errors.Is(probeErr, unix.ESTALE) {
		return fmt.Errorf("its server no longer knows the mount's root (the export was removed or re-created, as after a failover): %w", probeErr)
	}
	return probeErr
}
