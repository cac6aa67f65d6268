package netmount

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// MaxHealBackoff caps the doubling delay between attempts to replace a dead mount: once the
// server is back, a mount is replaced within this much (plus one mount) at most.
const MaxHealBackoff = 5 * time.Second

// healer is what a system needs for the Manager to probe its mounts and replace dead ones
// under running containers; liveSystem has it. A system without it (the unit tests' fake)
// leaves held mounts alone.
type healer interface {
	// daemonGone says, for a filesystem served by a daemon (FUSE), that the scope of unit has
	// no process left: the daemon is gone (the error says so, naming the scope). nil when it
	// cannot tell.
	daemonGone(s netspec.Spec, unit string) error
	// replace puts the filesystem mounted at staging in the place of the dead mount at
	// target, so that rslave and rshared copies of it see the new one (see replaceDead).
	replace(target, staging string) error
	// prepareStaging makes dir a private mount of its own, for new mounts to be moved away.
	prepareStaging(dir string) error
	// reachServer says whether the server of s accepts a connection, within DialTimeout:
	// nil if it does or where that cannot be told (see dialAny).
	reachServer(ctx context.Context, s netspec.Spec) error
}

// Use is one class mount that uses a network mount: for the log of a death (which running
// containers get the new mount) and status.
type Use struct {
	Class       string
	Propagation string // rprivate, rslave or rshared
}

// heal is what an entry knows about its deaths and recoveries. Guarded by Manager.mu.
type heal struct {
	probing      bool      // a probe is under way (or stuck)
	deaths       int       // times it was found dead
	recoveries   int       // times it was replaced
	deadSince    time.Time // start of the current death
	lastDeath    time.Time
	lastRecovery time.Time
	lastCause    error         // why it was last found dead
	lastTook     time.Duration // the last recovery, from the death to the new mount
	// stopAttempt ends the replacement attempt under way (nil between attempts): its last
	// container gone, a dead mount is not worth the rest of a mount that may hang until
	// mountTimeout.
	stopAttempt context.CancelFunc
}

// startProber starts probing the held mounts every ProbeInterval, if the system can heal; a
// Reconfigure changes the interval from then on (0: no probes).
func (m *Manager) startProber() {
	if _, ok := m.sys.(healer); !ok {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			m.mu.Lock()
			every, reconfigured := m.cfg.ProbeInterval, m.reconfigured
			m.mu.Unlock()
			var tick <-chan time.Time // nil: not probed until a Reconfigure sets an interval
			if every > 0 {
				tick = time.After(every) // collected once unreferenced, fired or not (Go 1.23)
			}
			select {
			case <-m.ctx.Done():
				return
			case <-reconfigured:
				continue // a new interval, from now
			case <-tick:
			}
			m.mu.Lock()
			for _, e := range m.entries {
				if e.phase == mounted && !e.retired && !e.heal.probing && !m.closed {
					e.heal.probing = true
					m.wg.Add(1)
					go m.probeHeld(e)
				}
			}
			m.mu.Unlock()
		}
	}()
}

// probeHeld probes one mounted entry, bounded by ProbeTimeout (a stat of a dead server's
// mount can hang: the stat is left behind, and while it hangs no other probe of the mount, or
// of a kernel client's server, starts: see probeKey), and starts its recovery if it is dead. A
// probe refused so is dead too: its server does not answer.
func (m *Manager) probeHeld(e *entry) {
	defer m.wg.Done()
	cause := m.health(e)
	m.mu.Lock()
	defer m.mu.Unlock()
	e.heal.probing = false
	if !unusable(cause, true) || m.closed || e.phase != mounted || m.entries[e.key] != e {
		return
	}
	m.deadLocked(e, cause)
}

// deadLocked marks e dead and starts replacing it.
func (m *Manager) deadLocked(e *entry, cause error) {
	now := time.Now()
	e.phase, e.since, e.attempt, e.retryAt = dead, now, 0, time.Time{}
	e.lastErr = fmt.Errorf("dead: %w", cause)
	e.heal.deaths++
	m.totals.Deaths++
	e.heal.deadSince, e.heal.lastDeath, e.heal.lastCause = now, now, cause
	m.stopGraceLocked(e)
	e.broadcast()
	log := m.healLog(e)
	log.WithError(cause).Error("netmount: the mount is dead: replacing it under the running containers")
	for _, u := range m.affectedLocked(e) {
		log.WithField("container", u.user).Warn("netmount: " + u.what)
	}
	m.wg.Add(1)
	go m.healLoop(e)
}

type affected struct{ user, what string }

// affectedLocked says, per container using e, whether it gets the new mount: only through an
// rslave or rshared class mount (see Config.Uses); an rprivate one keeps the dead mount.
func (m *Manager) affectedLocked(e *entry) []affected {
	uses := m.cfg.Uses[e.key]
	var private, healed []string
	for _, u := range uses {
		if u.Propagation == "rslave" || u.Propagation == "rshared" {
			healed = append(healed, u.Class+" ("+u.Propagation+")")
		} else {
			private = append(private, u.Class+" ("+cmp.Or(u.Propagation, "rprivate")+")")
		}
	}
	var what string
	switch {
	case len(uses) == 0:
		what = "uses the dead mount: it gets the new mount if its class mount is rslave or rshared; an rprivate one keeps the dead mount until the container is restarted"
	case len(private) == 0:
		what = "uses the dead mount through " + strings.Join(healed, ", ") + ": it will see the new mount in place, without a restart (files it held open stay broken)"
	case len(healed) == 0:
		what = "uses the dead mount through " + strings.Join(private, ", ") + ": an rprivate class mount cannot be healed in place: restart the container to get the new mount"
	default:
		what = "uses the dead mount: through " + strings.Join(healed, ", ") + " it will see the new mount in place; through " +
			strings.Join(private, ", ") + " it cannot be healed in place: restart it to get the new mount"
	}
	users := make([]string, 0, len(e.users))
	for u := range e.users {
		users = append(users, u)
	}
	slices.Sort(users)
	out := make([]affected, len(users))
	for i, u := range users {
		out[i] = affected{u, what}
	}
	return out
}

// healLog is the log of e with its users (container IDs).
func (m *Manager) healLog(e *entry) *logrus.Entry {
	users := make([]string, 0, len(e.users))
	for u := range e.users {
		users = append(users, shortID(u))
	}
	slices.Sort(users)
	return m.logFor(e).WithField("containers", strings.Join(users, ","))
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// healLoop replaces dead e until it is replaced, no container uses it any more, or the
// Manager is closed, waiting RetryBackoff (doubling, at most MaxHealBackoff) between attempts.
func (m *Manager) healLoop(e *entry) {
	m.retryLoop(e, retry{
		maxBackoff: MaxHealBackoff,
		giveUp:     func() bool { return m.unmountUnusedDeadLocked(e) },
		begin:      func() { e.phase = recovering },
		try:        func(attempt int) error { return m.healOnce(e, attempt) },
		succeeded: func(attempt int) func() {
			now := time.Now()
			e.heal.recoveries++
			m.totals.Recoveries++
			e.heal.lastRecovery = now
			e.heal.lastTook = now.Sub(e.heal.deadSince)
			log := m.healLog(e).WithFields(logrus.Fields{"attempt": attempt, "took": e.heal.lastTook.Round(time.Millisecond)})
			return func() { log.Info("netmount: recovered: the new mount is in place under the running containers") }
		},
		failed: func(attempt int, err error, retryIn time.Duration) func() {
			next := fmt.Errorf("recovering (dead: %v): %w", e.heal.lastCause, err)
			// A server that stays away fails every attempt the same way, every 5 s: the
			// first says so, and the status counts the rest (its attempt).
			again := e.lastErr != nil && e.lastErr.Error() == next.Error()
			e.lastErr = next
			log := m.healLog(e).WithError(err).WithFields(logrus.Fields{"attempt": attempt, "retry_in": retryIn})
			if again {
				return func() { log.Debug("netmount: recovery attempt failed again, the same way: retrying") }
			}
			return func() { log.Warn("netmount: recovery attempt failed: retrying") }
		},
	})
}

// unmountUnusedDeadLocked hands dead e to its unmount instead of its next replacement once no
// container uses it (and the running containers' claims are known: synced): a dead server's
// mount that nobody uses would otherwise be mounted again at every attempt, for as long as the
// server stays away, and kept after. Its grace period is not waited for: it exists to keep a
// mount that answers for the next container, and a new container mounts anew.
func (m *Manager) unmountUnusedDeadLocked(e *entry) bool {
	if !m.synced || len(e.users) > 0 {
		return false
	}
	m.healLog(e).Info("netmount: no container uses the dead mount any more: unmounting it instead of replacing it")
	m.beginUnmountLocked(e)
	go m.unmount(e)
	return true
}

// healOnce makes one attempt to replace dead e: what is left of its daemon is killed, the
// filesystem is mounted again in e's scope at a staging path, probed, and put in place of
// the dead mount (see replaceDead).
func (m *Manager) healOnce(e *entry, attempt int) error {
	m.mu.Lock()
	ctx, cancel := context.WithCancel(m.ctx)
	e.heal.stopAttempt = cancel
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		e.heal.stopAttempt = nil
		m.mu.Unlock()
		cancel()
	}()
	// A helper started against a server that refuses connections or does not answer would
	// only fail, retrying until MountTimeout: each attempt would cost the node a helper's
	// start (the CPU of containers being created meanwhile) for nothing. Nothing else is worth
	// its cost then either (the preflight, the lock, mountinfo, a probe of the dead mount): its
	// server away, the dead mount cannot have come back.
	if dialFirst(attempt) {
		if err := m.sys.(healer).reachServer(ctx, e.spec); err != nil {
			return err
		}
	}
	unlock, mounted, err := m.prepareMount(e)
	if err != nil {
		return err
	}
	defer unlock()
	if mounted && !unusable(m.health(e), true) {
		return nil // a hook (EnsureMounted) replaced it, or its server came back to it, meanwhile
	}
	if err := replaceInPlace(ctx, m.sys, m.config(), e.spec, e.unit, filepath.Dir(m.stateDir), e.hostPath,
		e.key+"."+strconv.Itoa(attempt), mounted); err != nil {
		return err
	}
	return m.saveState(e)
}

// daemonGone implements healer: a FUSE filesystem (fuse.*, glusterfs) whose cgroup scope
// (CgroupScoper) exists and has no process. A systemd scope's name is not known here: nil.
func (l *liveSystem) daemonGone(s netspec.Spec, unit string) error {
	if !strings.HasPrefix(s.Type, "fuse.") && s.Type != "fuse" && s.Type != "glusterfs" {
		return nil
	}
	sc, ok := l.scoper.(*CgroupScoper)
	if !ok {
		return nil
	}
	procs, err := os.ReadFile(filepath.Join(sc.Dir(unit), "cgroup.procs"))
	if err == nil && len(strings.TrimSpace(string(procs))) == 0 {
		return fmt.Errorf("its daemon is gone (no process in scope %s)", sc.Dir(unit))
	}
	return nil
}

func (l *liveSystem) replace(target, staging string) error { return replaceDead(target, staging) }

func (l *liveSystem) prepareStaging(dir string) error { return makePrivateDir(dir) }

// ensureReplaced is a hook's replacement of the dead mount of s at hostPath (EnsureMounted):
// the same as the Manager's, once, under the key's lock the caller holds.
func ensureReplaced(ctx context.Context, c Config, sys system, s netspec.Spec, stateDir, hostPath string) error {
	if err := sys.preflight(s); err != nil {
		return err
	}
	return replaceInPlace(ctx, sys, c, s, unitFor(s.Key()), stateDir, hostPath, s.Key()+".hook"+strconv.Itoa(os.Getpid()), true)
}

// replaceInPlace ends what is left of the dead mount's daemon (in the scope of unit: the
// mount's, which for a mount adopted from an earlier version is that of the key it was made
// under) (a hung one, its server gone,
// would keep the scope; nothing of it is needed), mounts s again in its scope at a staging
// path below stateDir named name, within c's timeouts, checks that the new mount answers (a dead mount is never traded for another: a server
// that accepts mounts but does not serve yet, a GlusterFS volume whose bricks are down), and
// puts it in place: on top of the dead mount at hostPath (h.replace: it then reaches the
// containers' rslave and rshared copies), or simply there when nothing is mounted. What it
// mounted and did not use is unmounted and its scope ended. The plugin's heal (healOnce) and
// the hooks' (ensureReplaced) both replace this way.
func replaceInPlace(ctx context.Context, sys system, c Config, s netspec.Spec, unit, stateDir, hostPath, name string, mounted bool) error {
	h := sys.(healer)
	killErr := sys.killScope(unit)
	stagingDir := filepath.Join(stateDir, "staging")
	// The wait for the lock is bounded like the mount itself: the caller holds the key's lock
	// meanwhile, and a holder that hangs must not hold this key for ever.
	lctx, lcancel := context.WithTimeout(ctx, c.MountTimeout)
	err := withMountsLock(lctx, stateDir, func() error { return h.prepareStaging(stagingDir) })
	lcancel()
	if err != nil {
		return err
	}
	staging := filepath.Join(stagingDir, name)
	if err := os.Mkdir(staging, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	defer os.Remove(staging)
	if _, err := attemptMount(ctx, sys, c, filepath.Join(stateDir, "secrets"), s, unit, staging); err != nil {
		if killErr != nil {
			err = fmt.Errorf("%w (what was left of the dead mount's daemon could not be ended: %v)", err, killErr)
		}
		return err
	}
	discard := func(cause error) error {
		// Not m.ctx: an agent shutting down still unmounts what it mounted and will not use.
		uctx, cancel := context.WithTimeout(context.Background(), c.UnmountTimeout)
		defer cancel()
		if err := sys.unmount(uctx, staging, true); err != nil {
			cause = fmt.Errorf("%w; and the unused new mount could not be unmounted: %v", cause, err)
		}
		sys.killScope(unit)
		return cause
	}
	if perr := probeMount(sys, s, unit, staging); unusable(perr, true) {
		return discard(errors.New("the new mount does not answer either"))
	}
	if !mounted {
		if err := unix.MoveMount(unix.AT_FDCWD, staging, unix.AT_FDCWD, hostPath, 0); err != nil {
			return discard(fmt.Errorf("move the new mount to %s: %w", hostPath, err))
		}
		return nil
	}
	if err := h.replace(hostPath, staging); err != nil {
		return discard(err)
	}
	return nil
}
