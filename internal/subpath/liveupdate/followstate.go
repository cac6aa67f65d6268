package liveupdate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
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

// save writes the state file (atomically: a new file renamed over it). A closed Follower
// writes nothing: what Close recorded is for its successor. Saves asked for while one writes
// are served by one more: each write takes the state as it is when it begins, so when save
// returns, the file holds what its caller changed before.
func (f *Follower) save() {
	if f.statePath == "" {
		return
	}
	f.saveAsked.Add(1)
	f.saveMu.Lock()
	defer f.saveMu.Unlock()
	if f.saveAsked.Swap(0) == 0 {
		return // a write that began after this was asked for served it
	}
	f.writeState()
}

// saveSoon asks for a save without waiting for one under way: that one's writer writes again
// for it. An update worker goes on with the next volume meanwhile (a rollout's updates would
// otherwise queue behind each other's writes of the whole file), and saves before it ends
// (work), so that Close, which waits for the workers, finds everything they applied saved.
func (f *Follower) saveSoon() {
	if f.statePath == "" {
		return
	}
	f.saveAsked.Add(1)
	for f.saveMu.TryLock() {
		for f.saveAsked.Swap(0) != 0 {
			f.writeState()
		}
		f.saveMu.Unlock()
		if f.saveAsked.Load() == 0 {
			return // else asked between the last write and the unlock, by one that found it locked
		}
	}
}

// writeState writes the state file as it is now. Callers hold saveMu.
func (f *Follower) writeState() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	lps := make([]*livePath, 0, len(f.paths)+len(f.pending))
	for _, lp := range f.paths {
		lps = append(lps, lp)
	}
	for _, lp := range f.pending { // not followed yet: kept for when they are
		lps = append(lps, lp)
	}
	f.mu.Unlock()
	st := stateFile{Version: stateVersion, Paths: make([]statePath, 0, len(lps))}
	for _, lp := range lps { // lock order: a livePath's mu before f.mu, never under it
		lp.mu.Lock()
		st.Paths = append(st.Paths, statePath{
			Container: lp.ctr, Target: lp.cp.Target.Path, Path: lp.cp.Path, BaseRoot: lp.baseRoot,
			VolumeDir: lp.cp.VolumeDir, Kind: lp.cp.Kind, SubPath: lp.cp.SubPath, Idmap: lp.cp.Idmap,
			Version: lp.version, Current: lp.current, Data: lp.data, Bytes: lp.used.Bytes, Entries: lp.used.Entries,
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

// recoverVersions makes lp, read from a state file (roots: of the mounts at its path), agree with what is on the node: the file
// may be older than the mounts (an agent killed between an update's mount and its save, or
// closed while its worker applied one). The version in force is the one mounted on top at
// its path; the next version is numbered after every P.v<n> there; and the versions an
// earlier agent replaced (retired, perhaps still held open, perhaps never freed) are returned
// to be retired again, with the base when a layer shadows it. A version mounted at the path
// is never among them.
func (f *Follower) recoverVersions(lp *livePath, roots []string) []retiredCopy {
	lp.last = lp.version
	mounted := map[int]bool{}
	for _, root := range roots {
		if v, ok := versionOfRoot(root, lp.baseRoot); ok {
			mounted[v] = true
		}
	}
	if top, ok := f.topVersion(lp); ok && top != lp.version {
		lp.version, lp.current = top, ""
		if top > 0 {
			lp.current = lp.versionPath(top)
		}
		shown := lp.cp.Path
		if lp.current != "" {
			shown = lp.current
		}
		_, lp.used = f.measure(shown)
		lp.data = "" // of another version: the next kick copies what ..data names now
	}
	mounted[lp.version] = true
	var left []retiredCopy
	names, _ := os.ReadDir(filepath.Dir(lp.cp.Path))
	for _, e := range names {
		v, ok := versionOfRoot(e.Name(), filepath.Base(lp.cp.Path))
		if !ok {
			continue
		}
		lp.last = max(lp.last, v)
		if !mounted[v] {
			left = append(left, retiredCopy{ctr: lp.ctr, pod: lp.cp.Target.PodUID, path: lp.versionPath(v), measure: true})
		}
	}
	if lp.version > 0 {
		// Emptied already if the earlier agent freed it: then what it releases is nothing.
		left = append(left, retiredCopy{ctr: lp.ctr, pod: lp.cp.Target.PodUID, path: lp.cp.Path, base: true, measure: true})
	}
	return left
}

// topVersion is the version of lp mounted on top at its path (0: the base).
func (f *Follower) topVersion(lp *livePath) (int, bool) {
	n, err := openPath(lp.cp.Path)
	if err != nil {
		return 0, false
	}
	defer n.Close()
	m, err := subpath.System{}.Mount(n)
	if err != nil {
		return 0, false
	}
	if m.Root == lp.baseRoot {
		return 0, true
	}
	return versionOfRoot(m.Root, lp.baseRoot)
}

// versionOfRoot is n when name is base.v<n>.
func versionOfRoot(name, base string) (int, bool) {
	num, ok := strings.CutPrefix(name, base+".v")
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(num)
	if err != nil || v <= 0 || strconv.Itoa(v) != num {
		return 0, false
	}
	return v, true
}

// Resume follows again the live copies an earlier agent recorded, of the containers in
// running (true: it runs, its runtime bound the copies), and applies at once an update that
// came while nobody watched: Load, then ResumeLoaded. It returns how many it resumed.
func (f *Follower) Resume(running map[string]bool) (int, error) {
	if _, err := f.Load(running); err != nil {
		return 0, err
	}
	return f.ResumeLoaded(nil)
}

// Load reads the live copies an earlier agent (or this one) recorded, of the containers in
// running, that are not followed yet: ResumeLoaded follows them. It only reads the state
// file, so that it can run while the runtime waits (Synchronize); the mounts are looked at
// by ResumeLoaded. Until then the records stay in the state file, whatever else is saved
// meanwhile, and a container stopped meanwhile (Stop) drops its own. Loading again replaces
// what a former Load left, so that a repeated Synchronize never resumes a copy twice.
func (f *Follower) Load(running map[string]bool) (int, error) {
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
	kubeletRoot := f.copier().KubeletRoot()
	pending := map[string]*livePath{}
	for _, sp := range st.Paths {
		on, known := running[sp.Container]
		if !known {
			continue
		}
		t, ok := subpath.ParseTarget(kubeletRoot, sp.Target)
		if !ok {
			continue
		}
		pending[sp.Path] = &livePath{
			ctr: sp.Container, baseRoot: sp.BaseRoot, armed: on,
			cp:      copies.Copy{Target: t, Kind: sp.Kind, SubPath: sp.SubPath, Path: sp.Path, VolumeDir: sp.VolumeDir, Data: sp.Data, Live: true, Idmap: sp.Idmap, Bytes: sp.FirstBytes, Entries: sp.FirstEntries},
			version: sp.Version, current: sp.Current, data: sp.Data, used: copies.Usage{Bytes: sp.Bytes, Entries: sp.Entries},
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for path := range pending {
		if _, followed := f.paths[path]; followed {
			delete(pending, path)
		}
	}
	f.pending = pending
	return len(pending), nil
}

// ResumeLoaded follows the live copies Load read, and applies at once an update that came
// while nobody watched; stop (nil: never) says to give up between two copies (a newer
// Synchronize loaded again). It returns how many it resumed; a recorded copy whose path is no
// longer a mount point (the node rebooted, the container went) is dropped.
func (f *Follower) ResumeLoaded(stop func() bool) (int, error) {
	f.mu.Lock()
	todo := make([]*livePath, 0, len(f.pending))
	for _, lp := range f.pending {
		todo = append(todo, lp)
	}
	f.mu.Unlock()
	if len(todo) == 0 {
		return 0, nil
	}
	sort.Slice(todo, func(i, j int) bool { return todo[i].cp.Path < todo[j].cp.Path })
	roots := mountRoots(f.copier().Dir) // read once: on a node of many pods it is long
	n := 0
	var errs []error
	for _, lp := range todo {
		if stop != nil && stop() {
			break
		}
		if info, err := (subpath.System{}).Stat(lp.cp.Path); err != nil || !info.MountRoot {
			f.dropPending(lp)
			continue
		}
		lp.mu.Lock() // save reads it meanwhile
		left := f.recoverVersions(lp, roots[lp.cp.Path])
		lp.mu.Unlock()
		switch err := f.followPending(lp); {
		case errors.Is(err, errNotPending):
			continue // stopped meanwhile, or loaded again
		case err != nil:
			errs = append(errs, err)
			continue
		}
		for _, old := range left {
			f.retire(old)
		}
		n++
		f.kick(lp.cp.VolumeDir)
	}
	f.save()
	return n, errors.Join(errs...)
}

// mountRoots are the roots of the mounts at each mount point below dir.
func mountRoots(dir string) map[string][]string {
	roots := map[string][]string{}
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return roots
	}
	for _, m := range ms {
		roots[m.Mountpoint] = append(roots[m.Mountpoint], m.Root)
	}
	return roots
}

// dropPending forgets lp, loaded and not to be followed.
func (f *Follower) dropPending(lp *livePath) {
	f.mu.Lock()
	if f.pending[lp.cp.Path] == lp {
		delete(f.pending, lp.cp.Path)
	}
	f.mu.Unlock()
}
