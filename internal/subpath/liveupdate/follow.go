package liveupdate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
)

// Results of an update, the label of mountkeeper_live_subpath_updates_total.
const (
	UpdateApplied    = "applied"
	UpdateOverBudget = "over_budget" // the new content does not fit the pod's budget: not applied
	UpdateRefused    = "refused"     // it cannot be copied safely (a symlink out of the volume, a FIFO, gone)
	UpdateFailed     = "failed"      // the mount steps failed; the container keeps what it has
)

// UpdateResults are the results, for counters that show each at 0.
var UpdateResults = []string{UpdateApplied, UpdateOverBudget, UpdateRefused, UpdateFailed}

// Update is one update of one live copy, for the front end's log line and metrics.
type Update struct {
	Container string
	Copy      copies.Copy // the live copy; Copy.Path is its path in the container's mount
	Version   int         // the version now shown (on UpdateApplied)
	Result    string
	Err       error
}

// updateTimeout bounds the copy of one new version.
const updateTimeout = 10 * time.Second

// Follower makes live copies follow their volumes.
type Follower struct {
	copies    *copies.Copies
	ops       layerOps
	statePath string
	onUpdate  func(Update)
	w         *watcher
	ctx       context.Context
	cancel    context.CancelFunc

	saveMu    sync.Mutex   // one save at a time: they write the same temporary file
	saveAsked atomic.Int64 // saves asked for and not begun: a save that begins serves them all
	scanMu    sync.Mutex   // one scan at a time (retired.go)

	mu        sync.Mutex
	closed    bool                  // Close saved what its workers applied: nothing is saved after
	paths     map[string]*livePath  // by copy path
	pending   map[string]*livePath  // by copy path: recorded, loaded (Load), not followed yet
	epoch     uint64                // Mark's count: a path followed since has since > a Mark before
	vols      map[string]*volWorker // by volume directory
	queue     []string              // volumes kicked, waiting for a worker
	busy      int                   // workers running (updateWorkers at most)
	workers   sync.WaitGroup        // the workers running, for Close
	retired   []*retiredCopy        // old versions, until nobody holds them
	scanner   chan struct{}         // closed to stop the scanner goroutine; nil while none runs
	scanned   chan struct{}         // closed when it ended
	scanKick  chan struct{}         // capacity 1: asks the scanner for a scan now
	scanStart time.Time             // when the scan under way began; zero while none runs
	counts    map[string]int64      // updates by result
	pids      map[string]uint32     // a started container's process, for its user namespace
	userns    map[string]int        // user namespace descriptors of containers, opened on need
	// scanInterval is how often the retired copies are looked for in /proc while any exist.
	scanInterval time.Duration
	// canBeneath says whether the kernel can attach a mount beneath another (nil if it can):
	// every update after the first needs it. A field for tests.
	canBeneath func() error
}

// livePath is one live copy.
type livePath struct {
	ctr      string
	cp       copies.Copy // the first copy: cp.Path is the base
	baseRoot string      // the base mount's root within the copy tmpfs
	since    uint64      // the Follower's epoch when it was followed (Mark, Keep)
	mu       sync.Mutex
	// Guarded by mu:
	armed   bool         // the container's runtime bound the path: updates may go on
	gone    bool         // no longer followed
	version int          // the version shown, 0 the first copy
	last    int          // the highest version number used (the next is last+1): P.v<n> may exist up to it
	current string       // the version's path, "" the base itself
	used    copies.Usage // what the version shown was charged
	data    string       // what ..data named when the version shown was copied
}

func (lp *livePath) versionPath(v int) string { return fmt.Sprintf("%s.v%d", lp.cp.Path, v) }

// volWorker is the update state of one volume: no goroutine of its own. A kick queues it,
// one of at most updateWorkers goroutines applies its updates and moves on; a kick while
// that runs makes one more pass, with the newest ..data. Guarded by Follower.mu.
type volWorker struct {
	users   int  // live paths of the volume
	queued  bool // in Follower.queue
	running bool // a worker makes a pass
	again   bool // kicked during the pass
}

// updateWorkers bounds the volumes updated at once: a ConfigMap shared by many pods, or a
// rollout that updates many, is applied in parallel (one volume's copy and mounts take
// milliseconds, mostly waiting on the kernel) without a goroutine and an OS thread per
// volume.
const updateWorkers = 8

// NewFollower returns a Follower of the copies c makes, recording its live copies in
// statePath; onUpdate is told each update (nil: nobody).
func NewFollower(c *copies.Copies, statePath string, onUpdate func(Update)) *Follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Follower{
		copies: c, ops: systemLayers{}, statePath: statePath, onUpdate: onUpdate, ctx: ctx, cancel: cancel,
		paths: map[string]*livePath{}, pending: map[string]*livePath{}, vols: map[string]*volWorker{}, counts: map[string]int64{},
		pids: map[string]uint32{}, userns: map[string]int{},
		scanInterval: 2 * time.Second, canBeneath: mounttable.CanMountBeneath,
	}
	if f.onUpdate == nil {
		f.onUpdate = func(Update) {}
	}
	f.w = newWatcher(f.kick)
	return f
}

// Dir is the directory of the copies it follows.
func (f *Follower) Dir() string { return f.copier().Dir }

// UseCopies makes f charge and copy through c from now on: the copier of a config reloaded
// with the same copy directory (and maybe other budgets).
func (f *Follower) UseCopies(c *copies.Copies) {
	f.mu.Lock()
	f.copies = c
	f.mu.Unlock()
}

func (f *Follower) copier() *copies.Copies {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.copies
}

// Track makes container id's live copies among cps follow their volumes once the
// container runs (Arm): each copy's path becomes a mount point of its own now, before the
// runtime binds it. It returns the copies it could not make live, with why; they stay
// static copies, which the front end binds as before.
func (f *Follower) Track(id string, cps []copies.Copy) map[string]error {
	failed := map[string]error{}
	for _, cp := range cps {
		if !cp.Live {
			continue
		}
		if err := f.track(id, cp); err != nil {
			failed[cp.Path] = err
		}
	}
	f.save()
	return failed
}

func (f *Follower) track(id string, cp copies.Copy) error {
	// Config load refuses live classes on such a kernel; this is the Follower's own guard, so
	// that no caller makes a copy live that its second update could not replace (it would
	// stay a mount point of its own and every update fail).
	if err := f.canBeneath(); err != nil {
		return fmt.Errorf("live updates need to mount beneath a mount (MOVE_MOUNT_BENEATH, Linux 6.5 or newer): %w: %w", subpath.ErrNoBeneath, err)
	}
	if cp.VolumeDir == "" {
		return errors.New("the copy does not name its volume directory")
	}
	if err := f.ops.makeBase(cp.Path); err != nil {
		return fmt.Errorf("make %s a mount point of its own: %w", cp.Path, err)
	}
	root, err := f.baseRoot(cp.Path)
	if err == nil {
		err = f.follow(&livePath{ctr: id, cp: cp, baseRoot: root, data: cp.Data})
	}
	if err != nil {
		_ = f.ops.detachBelow(cp.Path)
		return err
	}
	return nil
}

// baseRoot is the root, within the copy tmpfs, of the mount at path (the base, right after
// makeBase).
func (f *Follower) baseRoot(path string) (string, error) {
	n, err := openPath(path)
	if err != nil {
		return "", err
	}
	defer n.Close()
	m, err := subpath.System{}.Mount(n)
	if err != nil {
		return "", err
	}
	return m.Root, nil
}

// errFollowed: the path is followed already; errNotPending: the loaded path is no longer to be
// resumed (its container stopped, or it was loaded again).
var (
	errFollowed   = errors.New("followed already")
	errNotPending = errors.New("no longer to be resumed")
)

// follow registers lp and watches its volume.
func (f *Follower) follow(lp *livePath) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.followLocked(lp)
}

// followPending follows lp, loaded by Load, if it is still to be resumed (errNotPending).
func (f *Follower) followPending(lp *livePath) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending[lp.cp.Path] != lp {
		return errNotPending
	}
	delete(f.pending, lp.cp.Path)
	return f.followLocked(lp)
}

// followLocked registers lp, once: a path followed twice would count its volume's users
// twice, and its worker would outlive the path. Callers hold f.mu.
func (f *Follower) followLocked(lp *livePath) error {
	if err := f.ctx.Err(); err != nil {
		return err
	}
	if _, ok := f.paths[lp.cp.Path]; ok {
		return errFollowed
	}
	lp.since = f.epoch
	vw := f.vols[lp.cp.VolumeDir]
	if vw == nil {
		if err := f.w.add(lp.cp.VolumeDir); err != nil {
			return err
		}
		vw = &volWorker{}
		f.vols[lp.cp.VolumeDir] = vw
	}
	vw.users++
	f.paths[lp.cp.Path] = lp
	return nil
}

// Arm lets the updates of container id's live copies go on: its runtime bound them (NRI
// PostStartContainer). An update that came since the copy was made is applied at once. pid
// is the container's process (0: unknown), whose user namespace idmaps the layers of its
// copies with Copy.Idmap.
func (f *Follower) Arm(id string, pid uint32) {
	f.SetPid(id, pid)
	for _, lp := range f.ofContainer(id) {
		lp.mu.Lock()
		lp.armed = true
		lp.mu.Unlock()
		f.kick(lp.cp.VolumeDir)
	}
}

// SetPid records container id's process (Synchronize, before Resume).
func (f *Follower) SetPid(id string, pid uint32) {
	if pid == 0 {
		return
	}
	f.mu.Lock()
	f.pids[id] = pid
	f.mu.Unlock()
}

// usernsOf is a descriptor of container id's user namespace, opened from its process once.
func (f *Follower) usernsOf(id string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fd, ok := f.userns[id]; ok {
		return fd, nil
	}
	pid := f.pids[id]
	if pid == 0 {
		return -1, errors.New("the container's process is not known: no user namespace to idmap the new version with")
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("the container's user namespace: %w", err)
	}
	f.userns[id] = fd
	return fd, nil
}

func (f *Follower) ofContainer(id string) []*livePath {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*livePath
	for _, lp := range f.paths {
		if lp.ctr == id {
			out = append(out, lp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cp.Path < out[j].cp.Path })
	return out
}

// kick queues volume dir for a pass of its updates, starting a worker if fewer than
// updateWorkers run.
func (f *Follower) kick(dir string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	vw := f.vols[dir]
	switch {
	case vw == nil || vw.queued || f.ctx.Err() != nil:
		return // not followed, or its pass is to come: it sees the newest ..data
	case vw.running:
		vw.again = true
		return
	}
	vw.queued = true
	f.queue = append(f.queue, dir)
	if f.busy < updateWorkers {
		f.busy++
		f.workers.Add(1)
		go f.work()
	}
}

// work makes the passes of the queued volumes, one after the other, and ends when none is
// left (or the Follower closes).
func (f *Follower) work() {
	defer f.workers.Done()
	applied := false
	f.mu.Lock()
	for len(f.queue) > 0 && f.ctx.Err() == nil {
		dir := f.queue[0]
		f.queue = f.queue[1:]
		vw := f.vols[dir]
		if vw == nil {
			continue // no longer followed
		}
		vw.queued, vw.running = false, true
		f.mu.Unlock()
		applied = f.pass(dir) || applied
		f.mu.Lock()
		vw.running = false
		if vw.again && f.vols[dir] == vw {
			vw.again, vw.queued = false, true
			f.queue = append(f.queue, dir) // behind the others: one busy volume does not hold a worker
		}
	}
	f.busy--
	f.mu.Unlock()
	if applied {
		f.save() // what it applied is in the file before it ends: Close waits for the workers
	}
}

// pass applies the update of every live path of volume dir, if ..data changed, and says
// whether one changed (saved soon: saveSoon).
func (f *Follower) pass(dir string) bool {
	f.mu.Lock()
	var lps []*livePath
	for _, lp := range f.paths {
		if lp.cp.VolumeDir == dir {
			lps = append(lps, lp)
		}
	}
	f.mu.Unlock()
	sort.Slice(lps, func(i, j int) bool { return lps[i].cp.Path < lps[j].cp.Path })
	// ..data is read once per pass: every path of the volume switches in the same pass
	// (in path order), none left for the next one because the rename came between two.
	data, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		return false
	}
	changed := false
	for _, lp := range lps {
		changed = f.update(lp, data) || changed
	}
	if changed {
		f.saveSoon()
	}
	return changed
}

// update puts what lp's subPath names now on lp's path, if ..data, which named data at the
// start of this pass, changed since its version was copied. It says whether lp changed.
func (f *Follower) update(lp *livePath, data string) bool {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.gone || !lp.armed || data == lp.data {
		return false
	}
	// Numbered after every version made so far, not after the one shown: an older one may be
	// there still (held open, or left by an earlier agent and not retired yet).
	next := lp.last + 1
	lp.last = next
	dst := lp.versionPath(next)
	ctx, cancel := context.WithTimeout(f.ctx, updateTimeout)
	copier := f.copier()
	cp, _, err := copier.CopyTo(ctx, lp.ctr, lp.cp.Target, dst)
	cancel()
	u := Update{Container: lp.ctr, Copy: lp.cp, Version: lp.version}
	switch {
	case errors.Is(err, subpath.ErrOverBudget):
		u.Result, u.Err = UpdateOverBudget, err
	case err != nil:
		u.Result, u.Err = UpdateRefused, err
	}
	userns := -1
	if err == nil && lp.cp.Idmap {
		userns, err = f.usernsOf(lp.ctr)
		if err != nil {
			_ = os.RemoveAll(dst)
			copier.Release(lp.ctr, lp.cp.Target.PodUID, copies.Usage{Bytes: cp.Bytes, Entries: cp.Entries})
			u.Result, u.Err = UpdateFailed, err
		}
	}
	if err == nil {
		if err = f.ops.putLayer(lp.cp.Path, lp.baseRoot, dst, userns); err != nil {
			_ = os.RemoveAll(dst)
			copier.Release(lp.ctr, lp.cp.Target.PodUID, copies.Usage{Bytes: cp.Bytes, Entries: cp.Entries})
			u.Result, u.Err = UpdateFailed, err
		}
	}
	if err != nil && f.ctx.Err() != nil {
		return false // given up by Close, not refused: its successor tries again
	}
	// Not tried again for the same ..data: a refused update waits for the next one.
	lp.data = data
	if err != nil {
		f.count(u)
		return true
	}
	old := retiredCopy{ctr: lp.ctr, pod: lp.cp.Target.PodUID, path: lp.current, used: lp.used}
	if old.path == "" {
		old.path, old.base = lp.cp.Path, true
		old.used = copies.Usage{Bytes: lp.cp.Bytes, Entries: lp.cp.Entries}
	}
	lp.version, lp.current, lp.used = next, dst, copies.Usage{Bytes: cp.Bytes, Entries: cp.Entries}
	if cp.Data != "" {
		lp.data = cp.Data
	}
	f.retire(old)
	u.Result, u.Version = UpdateApplied, next
	f.count(u)
	return true
}

func (f *Follower) count(u Update) {
	f.mu.Lock()
	f.counts[u.Result]++
	f.mu.Unlock()
	f.onUpdate(u)
}

// Stop stops following container id's live copies (NRI StopContainer, RemoveContainer): their
// watches go (an update under way of one of them ends first; no goroutine is kept per volume), the mounts stay until the copies are removed (Copies.Remove), and
// the old versions it holds are no longer counted.
func (f *Follower) Stop(id string) { f.stop(id, true) }

// stop is Stop; without save the state file keeps the container (a closing agent leaves it
// for its successor, Resume).
func (f *Follower) stop(id string, save bool) {
	var unwatch []string
	var gone []*livePath
	f.mu.Lock()
	for p, lp := range f.paths {
		if lp.ctr != id {
			continue
		}
		delete(f.paths, p)
		gone = append(gone, lp)
		if vw := f.vols[lp.cp.VolumeDir]; vw != nil {
			if vw.users--; vw.users == 0 {
				delete(f.vols, lp.cp.VolumeDir) // a worker skips it, or ends its pass: lp.gone
				unwatch = append(unwatch, lp.cp.VolumeDir)
			}
		}
	}
	for p, lp := range f.pending {
		if lp.ctr == id {
			delete(f.pending, p)
		}
	}
	f.dropRetiredLocked(id)
	if fd, ok := f.userns[id]; ok {
		unix.Close(fd)
		delete(f.userns, id)
	}
	delete(f.pids, id)
	f.mu.Unlock()
	// Lock order: a livePath's mu before f.mu (an update takes f.mu under its path's).
	for _, lp := range gone {
		lp.mu.Lock() // waits for an update under way
		lp.gone = true
		lp.mu.Unlock()
	}
	for _, dir := range unwatch {
		f.w.remove(dir) // not under f.mu: its goroutine may be in kick
	}
	if save {
		f.save()
	}
}

// Mark is a point in time for Keep: the runtime's list of containers was taken before it.
func (f *Follower) Mark() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch++
	return f.epoch
}

// Keep stops following the live copies of every container not in running (Synchronize: the
// containers that went while the agent was away or that no longer run), among those followed
// before mark (Mark, taken when running was): a container created since is not in running,
// and runs.
func (f *Follower) Keep(running map[string]bool, mark uint64) {
	f.mu.Lock()
	gone := map[string]bool{}
	for _, lp := range f.paths {
		if !running[lp.ctr] && lp.since < mark {
			gone[lp.ctr] = true
		}
	}
	f.mu.Unlock()
	for id := range gone {
		f.Stop(id)
	}
}

// Close stops everything: the workers (it waits for them), watches, the scanner. The mounts stay, and the state file
// records the versions they show for the agent's successor (Resume): each worker saves what
// it applied before it ends; nothing is saved after.
func (f *Follower) Close() {
	f.cancel()       // a copy under way gives up, no worker takes another volume
	f.workers.Wait() // a layer a worker put, it saved before it ended
	f.mu.Lock()
	f.closed = true
	ids := map[string]bool{}
	for _, lp := range f.paths {
		ids[lp.ctr] = true
	}
	f.mu.Unlock()
	for id := range ids {
		f.stop(id, false)
	}
	f.w.close()
	f.stopScanner()
}

// LiveStatus is what status shows of the live copies.
type LiveStatus struct {
	Paths         int              `json:"paths"`
	RetiredCopies int              `json:"retiredCopies"`
	RetiredBytes  int64            `json:"retiredBytes"`
	Updates       map[string]int64 `json:"updates,omitempty"`
	// ScanningFor is how long the scan for held versions has run, once past scanStalled
	// (e.g. waiting on the kernel for a process's maps); empty otherwise.
	ScanningFor string `json:"scanningFor,omitempty"`
}

// Status reports the live copies, the old versions still held open and the updates so far.
func (f *Follower) Status() LiveStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := LiveStatus{Paths: len(f.paths), RetiredCopies: len(f.retired), Updates: map[string]int64{}}
	for _, r := range f.retired {
		st.RetiredBytes += r.used.Bytes
	}
	if !f.scanStart.IsZero() {
		if d := time.Since(f.scanStart); d >= scanStalled {
			st.ScanningFor = d.Round(time.Second).String()
		}
	}
	for k, v := range f.counts {
		st.Updates[k] = v
	}
	return st
}
