package netmount

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
)

// What `mountkeeper node cleanup` (package nodecleanup) asks of the network mounts a stopped
// agent left: which there are, and their release. The agent itself never unmounts a mount a
// container uses; nor does this: the caller checks who holds each first.

// HostMount is a network mount an agent left below its state directory.
type HostMount struct {
	Dir    string // below mounts/: the key it was made under
	Path   string // StateDir/mounts/<Dir>
	Device string // major:minor, as mountinfo shows it: the same in every namespace that holds it
	FSType string
	Spec   string // from its state file, redacted ("" without one)
}

// HostMounts lists the mounts directly below stateDir/mounts (from mountinfo and the state
// files: nothing is touched).
func HostMounts(stateDir string) ([]HostMount, error) {
	dir, err := filepath.EvalSymlinks(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	mountsDir := filepath.Join(dir, "mounts")
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(mountsDir))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	states, _ := readStates(filepath.Join(dir, "state"))
	var out []HostMount
	for _, i := range infos {
		if filepath.Dir(i.Mountpoint) != mountsDir {
			continue // mounts/ itself (bound onto itself to be shared)
		}
		hm := HostMount{Dir: filepath.Base(i.Mountpoint), Path: i.Mountpoint,
			Device: fmt.Sprintf("%d:%d", i.Major, i.Minor), FSType: i.FSType}
		if st, ok := states[hm.Dir]; ok {
			hm.Spec = st.spec().String()
		}
		out = append(out, hm)
	}
	return out, nil
}

// LockStateDir takes the state directory's lock that every agent holds while it runs
// (waiting at most wait): while it is held, no agent can start and mount again. Close the
// file to release it.
func LockStateDir(stateDir string, wait time.Duration) (*os.File, error) {
	return lockStateDir(stateDir, wait)
}

// ReleaseHostMount unmounts hm (not lazily: nothing may still use it; a busy mount fails),
// bounded by timeout, then removes its state and secret files, its directory and its scope
// (the FUSE daemon exits with its last mount; what is still left in the scope after that is
// killed). scoper nil means DetectScoper().
func ReleaseHostMount(ctx context.Context, stateDir string, hm HostMount, scoper Scoper, timeout time.Duration) error {
	if scoper == nil {
		sc, err := DetectScoper()
		if err != nil {
			return err
		}
		scoper = sc
	}
	sys := &liveSystem{env: LiveEnv{}, scoper: scoper}
	uctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := sys.unmount(uctx, hm.Path, false); err != nil {
		return fmt.Errorf("unmount %s: %w", hm.Path, err)
	}
	errs := []error{removeState(filepath.Join(stateDir, "state"), hm.Dir)}
	removeSecret(filepath.Join(stateDir, "secrets"), hm.Dir)
	if err := os.Remove(hm.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, endScope(ctx, sys, unitFor(hm.Dir)))
	return errors.Join(errs...)
}

// endScope removes the scope of unit once its daemon has exited (waiting up to 5s), killing
// what is left in it after that.
func endScope(ctx context.Context, sys *liveSystem, unit string) error {
	for deadline := time.Now().Add(5 * time.Second); ; {
		err := sys.removeScope(unit)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			if kerr := sys.killScope(unit); kerr != nil {
				return fmt.Errorf("scope %s: %w; kill what is left: %v", unit, err, kerr)
			}
			return sys.removeScope(unit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LeftoverScopes are the scopes of stateDir's mounts (the keys its locks/, state/ and mounts/
// name) that remain with no mount below stateDir/mounts: scopes of mounts already released,
// or made by an attempt that was killed. Empty ones are removed; the units of those with
// processes still in them are returned with their pids: a FUSE daemon whose host mount is
// gone may still serve a container that holds its filesystem, so it is not killed. Only a
// CgroupScoper can list its scopes; systemd collects its own.
func LeftoverScopes(stateDir string, scoper Scoper) (busy map[string][]int, err error) {
	cs, ok := scoper.(*CgroupScoper)
	if !ok {
		return nil, nil
	}
	live, err := HostMounts(stateDir)
	if err != nil {
		return nil, err
	}
	mounted := make(map[string]bool, len(live))
	for _, hm := range live {
		mounted[hm.Dir] = true
	}
	busy = make(map[string][]int)
	for _, key := range keysOf(stateDir) {
		unit := unitFor(key)
		if mounted[key] {
			continue
		}
		if _, err := os.Stat(cs.Dir(unit)); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if cs.Remove(unit) != nil {
			busy[unit] = cgroupPids(cs.Dir(unit))
		}
	}
	return busy, nil
}

// keysOf are the keys of every mount stateDir's agents made: each took the key's lock
// (locks/<key>.lock, never removed), and wrote its state and host directory.
func keysOf(stateDir string) []string {
	seen := make(map[string]bool)
	for sub, suffix := range map[string]string{"locks": ".lock", "state": ".json", "mounts": ""} {
		ents, _ := os.ReadDir(filepath.Join(stateDir, sub))
		for _, e := range ents {
			key, ok := strings.CutSuffix(e.Name(), suffix)
			if ok && key != "" && key != "mounts" && !strings.HasPrefix(key, ".") {
				seen[key] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

func cgroupPids(dir string) []int {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
