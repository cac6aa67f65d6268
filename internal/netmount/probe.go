package netmount

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
// mount, or of a kernel client's server, starts: see probeKey).
func probeMount(sys system, s netspec.Spec, unit, path string) error {
	if h, ok := sys.(healer); ok {
		if err := h.daemonGone(s, unit); err != nil {
			return err
		}
	}
	return staleCause(sys.probe(s, path))
}

// mountRef is the mount on top at a path, from mountinfo: ID 0 if nothing is mounted there.
type mountRef struct {
	ID           int    // the mount's ID
	SuperOptions string // its super options (addr= for NFS and CIFS)
}

// probeKey is what a probe of s mounted at target waits on (bounded.Key), given the mount on
// top there. One stuck probe per mount: keyed by the mount's ID, not only its path, so that
// the mount a heal put on top of a hung one is probed, not refused for as long as the stat of
// the hung one below hangs. And, for a kernel client (NFS, CIFS, Ceph), one per server: the
// kernel holds a connection per server address, and when the server dies every mount of it
// hangs, whatever its options, so a probe of a second mount would only add a thread stuck
// for as long. It is refused at once instead (bounded.ErrNoAnswer), which is the truth: that
// mount does not answer either. A FUSE mount has a daemon of its own, which may hang alone
// while the server serves another mount: per mount only.
//
// The server key is the server as the spec names it plus the address the kernel talks to
// (addr= in the super options, where shown): a stuck probe is freed when its server answers
// again at that address, which is when a new mount of it there could answer too; a server
// moved to another address (DNS) would never free it, but a new mount at the new address has
// a key of its own, so the heal is not refused for good.
func probeKey(s netspec.Spec, target string, top mountRef) bounded.Key {
	path := target
	if top.ID != 0 {
		path += " (mount " + strconv.Itoa(top.ID) + ")"
	}
	k := bounded.Key{Paths: []string{path}, Call: "probe " + path}
	server, err := s.ServerAddress()
	if err != nil {
		return k // counted under "": the server cannot be told from the spec
	}
	k.Tag = server
	if kernelClient(s.Type) {
		k.Server = server
		if addr := superOption(top.SuperOptions, "addr"); addr != "" {
			k.Server += " at " + addr
		}
	}
	return k
}

// superOption is the value of name=value in a mount's comma-separated super options.
func superOption(options, name string) string {
	for _, o := range strings.Split(options, ",") {
		if v, ok := strings.CutPrefix(o, name+"="); ok {
			return v
		}
	}
	return ""
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
