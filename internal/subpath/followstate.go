package subpath

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The live copies are recorded in a small state file (NewFollower's statePath) each time they
// change, so that an agent started again picks them up (Resume): their bases and layers stay
// mounted while the agent is away, and only the watch is missing. It names paths and versions,
// never content.

// stateVersion is the state file's format; a file of another version is ignored (the copies
// then stay static until their containers go).
const stateVersion = 1

type stateFile struct {
	Version int         `json:"version"`
	Paths   []statePath `json:"paths"`
}

type statePath struct {
	Container string `json:"container"`
	Target    string `json:"target"` // kubelet's bind target (Target.Path)
	Path      string `json:"path"`   // the copy's path: the base
	BaseRoot  string `json:"baseRoot"`
	VolumeDir string `json:"volumeDir"`
	Kind      string `json:"kind"`
	SubPath   string `json:"subPath"`
	Idmap     bool   `json:"idmap,omitempty"`
	Version   int    `json:"version"`
	Current   string `json:"current,omitempty"`
	Data      string `json:"data"`
	Bytes     int64  `json:"bytes"`
	Entries   int64  `json:"entries"`
	// FirstBytes and FirstEntries are the base's charge.
	FirstBytes   int64 `json:"firstBytes"`
	FirstEntries int64 `json:"firstEntries"`
}

// save writes the state file (atomically: a new file renamed over it). A closing Follower
// writes nothing: what is recorded is for its successor.
func (f *Follower) save() {
	if f.statePath == "" || f.ctx.Err() != nil {
		return
	}
	f.mu.Lock()
	lps := make([]*livePath, 0, len(f.paths))
	for _, lp := range f.paths {
		lps = append(lps, lp)
	}
	f.mu.Unlock()
	st := stateFile{Version: stateVersion, Paths: make([]statePath, 0, len(lps))}
	for _, lp := range lps { // lock order: a livePath's mu before f.mu, never under it
		lp.mu.Lock()
		st.Paths = append(st.Paths, statePath{
			Container: lp.ctr, Target: lp.cp.Target.Path, Path: lp.cp.Path, BaseRoot: lp.baseRoot,
			VolumeDir: lp.cp.VolumeDir, Kind: lp.cp.Kind, SubPath: lp.cp.SubPath, Idmap: lp.cp.Idmap,
			Version: lp.version, Current: lp.current, Data: lp.data, Bytes: lp.used.bytes, Entries: lp.used.entries,
			FirstBytes: lp.cp.Bytes, FirstEntries: lp.cp.Entries,
		})
		lp.mu.Unlock()
	}
	data, err := json.Marshal(st)
	if err != nil {
		return
	}
	tmp := f.statePath + ".tmp"
	if err := os.MkdirAll(filepath.Dir(f.statePath), 0o700); err != nil {
		return
	}
	if err := os.WriteFile(tmp, data, 0o600); err == nil {
		_ = os.Rename(tmp, f.statePath)
	}
}

// Resume follows again the live copies an earlier agent recorded, of the containers in
// running (true: it runs, its runtime bound the copies), and applies at once an update that
// came while nobody watched. It returns how many it resumed; a recorded copy whose path is
// no longer a mount point (the node rebooted, the container went) is dropped.
func (f *Follower) Resume(running map[string]bool) (int, error) {
	data, err := os.ReadFile(f.statePath)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		return 0, fmt.Errorf("state file %s: %w", f.statePath, err)
	}
	if st.Version != stateVersion {
		return 0, fmt.Errorf("state file %s has version %d, this agent reads %d: its live copies stay as they are", f.statePath, st.Version, stateVersion)
	}
	n := 0
	var errs []error
	for _, sp := range st.Paths {
		on, known := running[sp.Container]
		if !known {
			continue
		}
		t, ok := ParseTarget(f.copier().r.root, sp.Target)
		if !ok {
			continue
		}
		if info, err := (Live{}).Stat(sp.Path); err != nil || !info.MountRoot {
			continue
		}
		f.mu.Lock()
		_, dup := f.paths[sp.Path]
		f.mu.Unlock()
		if dup {
			continue
		}
		lp := &livePath{
			ctr: sp.Container, baseRoot: sp.BaseRoot, armed: on,
			cp:      Copy{Target: t, Kind: sp.Kind, SubPath: sp.SubPath, Path: sp.Path, VolumeDir: sp.VolumeDir, Data: sp.Data, Live: true, Idmap: sp.Idmap, Bytes: sp.FirstBytes, Entries: sp.FirstEntries},
			version: sp.Version, current: sp.Current, data: sp.Data, used: usage{sp.Bytes, sp.Entries},
		}
		if err := f.follow(lp); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		f.kick(sp.VolumeDir)
	}
	f.save()
	return n, errors.Join(errs...)
}
