package netmount

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
)

// unmount unmounts e, removes its state, host directory and scope. A umount that does not
// finish within UnmountTimeout, or fails on a mount that does not answer its probe (busy with
// threads stuck on a dead server), is escalated: umount -f where the system can, then umount -l.
func (m *Manager) unmount(e *entry) {
	defer m.wg.Done()
	log := m.logFor(e)
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.UnmountTimeout)
	err := m.sys.unmount(ctx, e.hostPath, false)
	cancel()
	dead := errors.Is(err, bounded.ErrNoAnswer)
	if err != nil && !dead && m.ctx.Err() == nil && errors.Is(m.sys.probe(e.spec, e.hostPath), bounded.ErrNoAnswer) {
		// "Busy" may be threads stuck on a dead server: a mount that does not answer is
		// escalated too, or it would be kept, and retried, for as long as the server is gone.
		log.WithError(err).Warn("netmount: unmount failed and the mount does not answer (a dead server?)")
		dead = true
	}
	if f, ok := m.sys.(forceUnmounter); ok && dead && m.ctx.Err() == nil {
		// umount -f (MNT_FORCE) asks a kernel client to abort its RPCs in flight. On 6.1 with
		// a stopped nfsd it did not end the unmount nor free the threads stuck on the mount
		// (TestNFSGuestDeadServer): the lazy unmount below is what detaches it.
		log.WithError(err).Warn("netmount: forcing the unmount (umount -f)")
		m.count(func(t *Totals) { t.ForcedUnmounts++ })
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.UnmountTimeout)
		err = f.forceUnmount(ctx, e.hostPath)
		cancel()
	}
	if dead && err != nil && m.ctx.Err() == nil {
		log.WithError(err).Warn("netmount: unmounting lazily (umount -l)")
		m.count(func(t *Totals) { t.LazyUnmounts++ })
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.UnmountTimeout)
		err = m.sys.unmount(ctx, e.hostPath, true)
		cancel()
	}

	if err == nil {
		if rerr := removeState(m.stateDir, e.dir); rerr != nil {
			log.WithError(rerr).Error("netmount: cannot remove the state of an unmounted mount")
		}
		removeSecret(m.secretsDir, e.dir)
		removeSecret(m.secretsDir, e.key)
		if rerr := os.Remove(e.hostPath); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			log.WithError(rerr).Debug("netmount: host directory of an unmounted mount not removed")
		}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	if err != nil {
		// Busy (used outside any container) or stuck: keep it and try again later.
		log.WithError(err).Warn("netmount: unmount failed: keeping the mount, trying again after the grace period")
		e.phase, e.lastErr = mounted, fmt.Errorf("unmount: %w", err)
		if len(e.users) == 0 && !e.wanted {
			m.startGraceLocked(e)
		}
		e.broadcast()
		m.mu.Unlock()
		return
	}
	e.phase = idle
	unit := e.unit // the scope the unmounted mount's daemon ran in
	if e.wanted {
		e.setDir(m.mountsDir, e.key) // an adopted mount of another key is mounted again at its spec's
		m.startMountLocked(e)
	} else {
		delete(m.entries, e.key)
		e.broadcast()
	}
	m.mu.Unlock()
	log.Info("netmount: unmounted")

	// A FUSE daemon exits shortly after its unmount; its scope can go once it has.
	for i := 0; ; i++ {
		rerr := m.sys.removeScope(unit)
		if rerr == nil {
			return
		}
		if i == 50 {
			log.WithError(rerr).Warn("netmount: scope of an unmounted mount not removed")
			return
		}
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// count updates the Manager's totals.
func (m *Manager) count(f func(*Totals)) {
	m.mu.Lock()
	f(&m.totals)
	m.mu.Unlock()
}

// forceUnmounter forces an unmount (umount -f, MNT_FORCE): the step between a plain umount
// that did not finish and a lazy one, for a kernel client whose server is gone. liveSystem
// implements it; the tests' fake systems need not.
type forceUnmounter interface {
	forceUnmount(ctx context.Context, target string) error
}
