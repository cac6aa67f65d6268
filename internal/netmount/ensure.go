package netmount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// EnsureMounted is the one-shot path of a hook: it returns the host path of s once s is
// mounted there, mounting it if need be, within ctx. Unlike a Manager it takes no lock on the
// state directory (the NRI plugin may hold that one for as long as it runs), adopts and
// counts nothing, and never unmounts (hook mode leaves its mounts in place):
//
//   - a live mount at the host path is returned at once, with no lock at all;
//   - otherwise it takes the lock of s's key alone (a flock on StateDir/locks/<key>.lock,
//     shared with the plugin's Manager), only while it mounts: hooks of the same spec wait for
//     each other and then find the mount made; hooks of other specs do not wait;
//   - an earlier version's live mount of s under another key (after an upgrade) is shared, as
//     the plugin's start-up adopts it, not mounted a second time;
//   - it writes the mount's state, so that a plugin started later adopts the mount if its
//     config has the spec.
func EnsureMounted(ctx context.Context, c Config, s netspec.Spec) (string, error) {
	c = c.withDefaults()
	if c.Scoper == nil {
		sc, err := DetectScoper()
		if err != nil {
			return "", err
		}
		c.Scoper = sc
	}
	return ensureMounted(ctx, c, &liveSystem{env: c.Env, scoper: c.Scoper}, s)
}

func ensureMounted(ctx context.Context, c Config, sys system, s netspec.Spec) (string, error) {
	c = c.withDefaults()
	if err := s.Validate(); err != nil {
		return "", fmt.Errorf("%s: %w", s, err)
	}
	dir, err := filepath.Abs(c.StateDir)
	if err != nil {
		return "", err
	}
	if err := mkdirPrivate(dir); err != nil {
		return "", err
	}
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return "", err
	}
	key := s.Key()
	mountsDir := filepath.Join(dir, "mounts")
	hostPath := filepath.Join(mountsDir, key)
	log := c.Log.WithFields(map[string]any{"mount": key, "spec": s.String()})

	if live, err := liveMount(ctx, sys, c, s, hostPath, false); err != nil {
		return "", fmt.Errorf("%s: %w", s, err)
	} else if live {
		return hostPath, nil
	}

	for _, d := range []string{mountsDir, filepath.Join(dir, "state"), filepath.Join(dir, "secrets"), filepath.Join(dir, "locks")} {
		if err := mkdirPrivate(d); err != nil {
			return "", err
		}
	}
	if err := makeSharedLocked(ctx, sys, dir, mountsDir); err != nil {
		return "", err
	}
	unlock, err := lockKey(ctx, dir, key)
	if err != nil {
		return "", fmt.Errorf("%s: not ready: %w", s, err)
	}
	defer unlock()
	// Another hook, or the plugin, may have mounted it while this one waited. A dead one is
	// replaced in place, so running containers of rslave/rshared classes get the new mount
	// too (heal.go); a system that cannot do that unmounts it lazily first.
	_, canHeal := sys.(healer)
	if live, err := liveMount(ctx, sys, c, s, hostPath, !canHeal); err != nil {
		return "", fmt.Errorf("%s: %w", s, err)
	} else if live {
		return hostPath, nil
	}
	if earlier, err := earlierMountOf(ctx, sys, dir, mountsDir, s); err != nil {
		return "", fmt.Errorf("%s: %w", s, err)
	} else if earlier != "" {
		log.WithField("made_as", filepath.Base(earlier)).Info("netmount: an earlier version's mount of this spec under another key: sharing it")
		return earlier, nil
	}
	if canHeal {
		if dead, err := sys.isMounted(hostPath); err != nil {
			return "", err
		} else if dead {
			if err := ensureReplaced(ctx, c, sys, s, dir, hostPath); err != nil {
				return "", fmt.Errorf("%s: the mount at %s is dead and replacing it failed: %w", s, hostPath, err)
			}
			log.Warn("netmount: the mount was dead: replaced it in place (running rslave/rshared containers see the new one)")
			return hostPath, nil
		}
	}
	if err := sys.preflight(s); err != nil {
		return "", fmt.Errorf("%s: %w", s, err)
	}
	if err := makeMountPoint(hostPath); err != nil {
		return "", err
	}
	unit, secretsDir := unitFor(key), filepath.Join(dir, "secrets")
	start := time.Now()
	if cleared, err := attemptMount(ctx, sys, c, secretsDir, s, unit, hostPath); err != nil {
		if cleared {
			sys.removeScope(unit)
			removeSecret(secretsDir, key)
		}
		return "", fmt.Errorf("%s: %w", s, err)
	}
	if err := writeState(filepath.Join(dir, "state"), key, newState(s, hostPath)); err != nil {
		log.WithError(err).Warn("netmount: cannot write the mount's state: a plugin started later will not adopt it")
	}
	log.WithField("took", time.Since(start).Round(time.Millisecond)).Info("netmount: mounted")
	return hostPath, nil
}

// earlierMountOf is the host path of a live mount below mountsDir that an earlier version
// made for s under another key (its state stands for s), or "": the plugin's start-up adopts
// such a mount for s by the same rule (planAdoption), and the hook shares it as the plugin
// does instead of mounting the export a second time. Looked for only when s's own path has no
// live mount, under s's key lock.
func earlierMountOf(ctx context.Context, sys system, stateDir, mountsDir string, s netspec.Spec) (string, error) {
	live, err := sys.mountsBelow(mountsDir)
	if err != nil || len(live) == 0 {
		return "", err
	}
	states, _ := readStates(filepath.Join(stateDir, "state")) // an unreadable one stands for nothing
	for _, f := range planAdoption(mountsDir, live, states, []netspec.Spec{s}).found {
		if !f.serves || f.dir == s.Key() {
			continue
		}
		// The rule liveMount applies, with the earlier mount's own scope.
		path := filepath.Join(mountsDir, f.dir)
		if mounted, err := sys.isMounted(path); err != nil {
			return "", err
		} else if mounted && !unusable(probeMount(sys, s, unitFor(f.dir), path), false) {
			return path, nil
		}
	}
	return "", nil
}

func keyLockPath(dir, key string) string { return filepath.Join(dir, "locks", key+".lock") }

// lockKey takes the flock of key's lock file in stateDir, waiting until ctx is done, and
// returns its release. The kernel releases it if the process dies.
func lockKey(ctx context.Context, stateDir, key string) (unlock func(), err error) {
	return flockWait(ctx, keyLockPath(stateDir, key))
}

func flockWait(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600) // close-on-exec, as Go opens files
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("another mountkeeper is mounting it (%s held until the deadline): %w", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// makeSharedLocked makes mountsDir a shared mount (see system.makeShared) under the mounts
// lock (withMountsLock).
func makeSharedLocked(ctx context.Context, sys system, stateDir, mountsDir string) error {
	return withMountsLock(ctx, stateDir, func() error { return sys.makeShared(mountsDir) })
}

// withMountsLock runs f under StateDir/locks/mounts.lock: what binds a state directory onto
// itself (mounts/, staging/) must not run twice at once, from two hooks, a hook and the
// plugin, or two keys of one plugin, or the second bind hides what the first holds.
func withMountsLock(ctx context.Context, stateDir string, f func() error) error {
	unlock, err := flockWait(ctx, filepath.Join(stateDir, "locks", "mounts.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	return f()
}
