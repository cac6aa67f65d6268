package netmount

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// What a starting agent finds below its state directory, and what it does with it.
//
// A mount an earlier agent made may be bound into running containers, whatever the earlier
// agent's version and whatever the config says now: start-up takes over every live mount
// below mounts/ and unmounts none. Only once the plugin has told the Manager which running
// containers use which mounts (HoldSources, Hold, then ReleaseUnused, after NRI's Synchronize)
// does a mount nobody uses begin its grace period. A mount that stands for a spec of the
// config (by its state file, migrated from the version that wrote it: state.recordsSpec) serves
// that spec's new containers too, probed and healed as any; one that stands for no spec of
// the config (the config changed while the agent was away), or that has no state file and no
// spec's key (an agent killed between its mount and its state file), is kept "retired": held
// by the containers that use it, never given to a new one, never healed (its state holds no
// secret to mount it again with), and released once unused.

// found is one live mount below mounts/ and what the starting agent makes of it.
type found struct {
	dir     string       // its directory below mounts/: the key it was made under
	spec    netspec.Spec // the config's spec it serves; for a retired mount the state's (redacted), for logs
	serves  bool         // it serves spec (a spec of the config): new containers get it
	noState bool         // it had no state file
}

// adoption is what start-up does with what an earlier agent left.
type adoption struct {
	found   []found
	remount []netspec.Spec // in the config, with a state file but no live mount: mounted again
	forget  []string       // dirs whose state names no live mount and no spec of the config
	foreign []string       // mounts below mounts/ but not directly: left alone
}

// planAdoption decides, from the live mounts below mountsDir, the state files (by dir) and the
// config's specs, what start-up adopts, mounts again and forgets. A live mount whose dir is a
// spec's key serves that spec; else one whose state stands for a spec (migration) serves it,
// unless another live mount serves it already; every other live mount is retired.
func planAdoption(mountsDir string, live map[string]bool, states map[string]state, wanted []netspec.Spec) adoption {
	var a adoption
	byKey := make(map[string]netspec.Spec, len(wanted))
	for _, s := range wanted {
		byKey[s.Key()] = s
	}
	var dirs []string
	for path := range live {
		if filepath.Dir(path) != mountsDir {
			a.foreign = append(a.foreign, path)
			continue
		}
		dirs = append(dirs, filepath.Base(path))
	}
	slices.Sort(dirs)
	slices.Sort(a.foreign)
	served := make(map[string]bool)
	// Exact keys first, so that a migrated mount never takes a spec from the mount made for it.
	for _, dir := range dirs {
		if s, ok := byKey[dir]; ok {
			_, has := states[dir]
			a.found = append(a.found, found{dir: dir, spec: s, serves: true, noState: !has})
			served[dir] = true
		}
	}
	for _, dir := range dirs {
		if served[dir] {
			continue
		}
		st, has := states[dir]
		f := found{dir: dir, noState: !has, spec: st.spec()}
		if !has {
			f.spec = netspec.Spec{Type: "unknown (no state file)", Source: dir}
		}
		for _, s := range wanted {
			if has && !served[s.Key()] && st.recordsSpec(dir, s) {
				f.spec, f.serves = s, true
				served[s.Key()] = true
				break
			}
		}
		a.found = append(a.found, f)
	}
	var stateDirs []string
	for dir := range states {
		stateDirs = append(stateDirs, dir)
	}
	slices.Sort(stateDirs)
	for _, dir := range stateDirs {
		if live[filepath.Join(mountsDir, dir)] {
			continue
		}
		if s, ok := byKey[dir]; ok && !served[dir] {
			a.remount = append(a.remount, s)
			served[dir] = true
			continue
		}
		a.forget = append(a.forget, dir)
	}
	return a
}

// adopt takes over what an earlier agent left below the state directory (planAdoption): every
// live mount is checked and kept, none unmounted; see the comment at the top of this file.
func (m *Manager) adopt() error {
	live, err := m.sys.mountsBelow(m.mountsDir)
	if err != nil {
		return err
	}
	states, errs := readStates(m.stateDir)
	for _, err := range errs {
		m.log.WithError(err).Warn("netmount: skipping an unreadable state file")
	}
	plan := planAdoption(m.mountsDir, live, states, m.cfg.Wanted)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range plan.found {
		e := m.newEntry(f.spec)
		if !f.serves {
			e.key, e.retired = f.dir, true // keyed by its dir: no spec of the config names it
		}
		e.setDir(m.mountsDir, f.dir)
		log := m.logFor(e)
		switch {
		case f.serves && f.dir == e.key && f.noState:
			log.Warn("netmount: found a mount without a state file at its spec's host path (an agent stopped while mounting it): checking it")
		case f.serves && f.dir != e.key:
			log.WithField("made_as", f.dir).Info("netmount: found an earlier agent's mount of this spec under another key (an earlier version's rules): adopting it; it keeps the options it was mounted with until it is mounted again")
		case f.serves:
			log.Info("netmount: found a mount of an earlier agent: checking it")
		case f.noState:
			log.Warn("netmount: found a mount without a state file that no spec of the config names: kept for the containers that use it, released once none does")
		default:
			log.Info("netmount: found an earlier agent's mount that is no longer in the config: kept for the containers that use it, released once none does")
		}
		if e.retired {
			// It serves no new container and cannot be mounted again: it is only held.
			e.phase, e.since, e.mountedAt = mounted, time.Now(), time.Now()
			m.entries[e.key] = e
			continue
		}
		m.entries[e.key] = e
		e.phase, e.since = checking, time.Now()
		m.wg.Add(1)
		go m.checkAdopted(e)
	}
	for _, s := range plan.remount {
		e := m.newEntry(s)
		m.entries[e.key] = e
		m.logFor(e).Info("netmount: an earlier agent's mount is gone: mounting it again")
		m.startMountLocked(e)
	}
	for _, dir := range plan.forget {
		m.forgetLocked(dir, states[dir])
	}
	for _, path := range plan.foreign {
		m.log.WithField("path", path).Warn("netmount: a mount below the state directory is not one of its mounts: left alone")
	}
	m.removeStaleScopesLocked()
	keep := make(map[string]bool)
	for _, e := range m.entries {
		keep[e.dir], keep[e.key] = true, true
	}
	removeSecretsExcept(m.secretsDir, keep, m.log)
	return nil
}

// forgetLocked drops the state an earlier agent left for a mount that is gone and that the
// config no longer asks for.
func (m *Manager) forgetLocked(dir string, st state) {
	log := m.log.WithFields(map[string]any{"mount": dir, "spec": st.spec().String()})
	log.Info("netmount: forgetting an earlier agent's mount that is no longer in the config (not mounted)")
	if err := removeState(m.stateDir, dir); err != nil {
		log.WithError(err).Error("netmount: cannot remove the state of a forgotten mount")
	}
	removeSecret(m.secretsDir, dir)
	os.Remove(filepath.Join(m.mountsDir, dir))
}

// HoldSources records user as using every mount that one of sources (host paths bound into a
// container: the OCI mounts' sources) lies in, whatever spec or agent made it, and says how
// many it holds. The plugin calls it at Synchronize for each running container, before
// ReleaseUnused: the container's own mounts say what it uses, even where the config no longer
// does (a class renamed or removed, a spec changed, an earlier version's key).
func (m *Manager) HoldSources(user string, sources []string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := 0
	for _, e := range m.entries {
		if !slices.ContainsFunc(sources, func(src string) bool { return within(src, e.hostPath) }) {
			continue
		}
		e.users[user] = struct{}{}
		m.stopGraceLocked(e)
		held++
	}
	return held
}

// unretireLocked makes a retired entry whose dir is its spec's key (a spec the config did not
// name at start-up is asked for now) an entry like any adopted one: checked (and healed where
// dead) before it is used.
func (m *Manager) unretireLocked(e *entry) {
	e.retired = false
	if e.phase != mounted {
		return // being unmounted: ensureLocked mounts it again afterwards
	}
	m.stopGraceLocked(e)
	e.phase, e.since = checking, time.Now()
	e.broadcast()
	m.wg.Add(1)
	go m.checkAdopted(e)
}

// within says whether path is dir or lies below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// setDir puts e at dir below mountsDir: its host path, scope, state and secret files are those
// of the key dir (the key its mount was made under).
func (e *entry) setDir(mountsDir, dir string) {
	e.dir, e.hostPath, e.unit = dir, filepath.Join(mountsDir, dir), unitFor(dir)
}

// LeftBehind says whether stateDir holds what an agent's Manager left: a state file or a
// mount below mounts/ (from mountinfo: nothing is touched). The plugin then starts a Manager
// even for a config without network mounts, so that they are adopted and released once no
// container uses them, not left for ever.
func LeftBehind(stateDir string) bool {
	if states, _ := os.ReadDir(filepath.Join(stateDir, "state")); slices.ContainsFunc(states, func(e os.DirEntry) bool {
		return strings.HasSuffix(e.Name(), ".json")
	}) {
		return true
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(stateDir, "mounts"))
	if err != nil {
		return false
	}
	live, err := (&liveSystem{}).mountsBelow(dir)
	return err == nil && len(live) > 0
}

// removeStaleScopesLocked removes the empty scopes an earlier agent left: one killed during a
// mount attempt never removed the attempt's scope. A scope with processes (a helper still at
// work, a FUSE daemon) fails to go and stays; the scopes of the mounts just adopted or being
// mounted again are not touched.
func (m *Manager) removeStaleScopesLocked() {
	units, err := m.sys.scopes()
	if err != nil {
		m.log.WithError(err).Warn("netmount: cannot list the mount scopes")
		return
	}
	inUse := make(map[string]bool, len(m.entries))
	for _, e := range m.entries {
		inUse[e.unit] = true
	}
	for _, u := range units {
		if !inUse[u] && strings.HasPrefix(u, "mount-") && m.sys.removeScope(u) == nil {
			m.log.WithField("scope", u).Debug("netmount: removed an empty scope an earlier agent left")
		}
	}
}

// checkAdopted probes a mount found at start-up: a live one is adopted as mounted. Where the
// system can heal, a dead one is replaced in place (heal.go) with the held mounts' meaning of
// dead (see health: its daemon gone, an error such as ENOTCONN, or no answer in time), so
// that the prober does not judge it otherwise one interval later. Else a dead one is
// unmounted lazily and mounted again, and one that does not answer is kept (see unusable).
func (m *Manager) checkAdopted(e *entry) {
	defer m.wg.Done()
	var err error
	if _, heals := m.sys.(healer); heals {
		if err = m.health(e); unusable(err, true) {
			m.mu.Lock()
			if !m.closed {
				m.deadLocked(e, fmt.Errorf("found dead at start-up: %w", err))
			}
			m.mu.Unlock()
			return
		}
	} else {
		err = m.keepOrUnmount(e)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	if err != nil {
		m.logFor(e).WithError(err).Warn("netmount: the mount found at start-up is dead: mounting it again")
		m.startMountLocked(e)
		return
	}
	m.logFor(e).Info("netmount: adopted the mount found at start-up")
	e.phase, e.mountedAt = mounted, time.Now()
	m.saveState(e) // rewritten: an older agent's state may hold secrets in clear
	m.graceIfUnusedLocked(e)
	e.broadcast()
}
