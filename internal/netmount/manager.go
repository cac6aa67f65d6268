package netmount

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// Manager mounts network filesystems on the host, once per netspec.Spec.Key, and shares each among
// its users (container IDs). Mounting runs in the background; no method waits on the network
// longer than its caller allows. Reference counts are kept in memory only: after a restart the
// plugin calls Acquire again for every running container.
type Manager struct {
	cfg        Config
	sys        system
	log        *logrus.Logger
	mountsDir  string
	stateDir   string
	secretsDir string   // secrets the helpers read from files (see secretFile)
	lock       *os.File // flock on StateDir/lock, held until Close

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // background goroutines

	mu      sync.Mutex
	closed  bool
	entries map[string]*entry
	// synced is set by the first ReleaseUnused: the plugin has claimed the mounts of the
	// running containers. From then on a mount that becomes ready with no users starts its
	// grace period at once; before, ReleaseUnused will.
	synced bool
	// totals are the deaths and recoveries of every mount this Manager held, released ones
	// included: what Prometheus' counters need, which must never go down (heal.go, Totals).
	totals Totals
	// reconfigured is closed and replaced by a Reconfigure that changes ProbeInterval, for
	// the prober.
	reconfigured chan struct{}
}

type phase int

const (
	idle       phase = iota // not mounted, nothing under way
	mounting                // attempts and backoffs until mounted
	checking                // a mount found at start-up is being probed
	mounted                 // mounted and usable
	unmounting              // the grace period is over and it is being unmounted
	dead                    // mounted, but found dead by a probe (heal.go)
	recovering              // dead, and being replaced under the running containers
)

// States names every phase, in order: the values MountStatus.State takes.
var States = []string{"idle", "mounting", "checking", "mounted", "unmounting", "dead", "recovering"}

func (p phase) String() string { return States[p] }

// entry is one host mount. Its fields are guarded by Manager.mu.
type entry struct {
	spec     netspec.Spec
	key      string // the spec's key; a retired entry's is its dir
	dir      string // below mounts/, state/, secrets/: the key its mount was made under (adopt.go)
	hostPath string
	unit     string
	retired  bool // an earlier agent's mount that serves no spec of the config: only held (adopt.go)

	phase   phase
	users   map[string]struct{}
	changed chan struct{} // closed and replaced on every change, for waiters
	since   time.Time     // start of the current phase's attempt or check
	attempt int
	retryAt time.Time // set while waiting to retry after a failure
	// retryNow ends that wait early (buffered, 1): a claim found that the helper a failed
	// preflight missed is installed now (Acquire).
	retryNow  chan struct{}
	lastErr   error
	mountedAt time.Time
	wanted    bool // asked for while unmounting: mount again afterwards

	graceGen   int // bumping it disarms a pending grace timer
	graceTimer *time.Timer
	graceSince time.Time // start of the pending grace period

	heal heal // deaths and recoveries (heal.go)
}

func (e *entry) broadcast() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// NewManager locks StateDir (one Manager per state directory: two would unmount each other's
// mounts; it waits DefaultLockWait for an agent being replaced to go), prepares it (mounts/ a
// shared mount of its own, state/ 0700), then adopts what an earlier agent left (adopt.go):
// every live mount below mounts/ is kept, whatever its key or the version that made it, and
// none is unmounted before the plugin has said which running containers use it; a mount that
// stands for a spec of the config is checked (bounded, in the background; a dead one is
// replaced in place, see checkAdopted) and serves it; a state file without a mount is
// mounted again in the background.
func NewManager(c Config) (*Manager, error) {
	c = c.withDefaults()
	if c.Scoper == nil {
		sc, err := DetectScoper()
		if err != nil {
			return nil, err
		}
		c.Scoper = sc
	}
	return newManager(c, &liveSystem{env: c.Env, scoper: c.Scoper})
}

func newManager(c Config, sys system) (*Manager, error) {
	c = c.withDefaults()
	dir, err := filepath.Abs(c.StateDir)
	if err != nil {
		return nil, err
	}
	// StateDir, mounts/ and each mount point are root's alone: 0700. runc, as root, binds from
	// them regardless. Issue 17 (user-namespaced containers) will need traversal here for the
	// container's root: revisit these modes then.
	if err := mkdirPrivate(dir); err != nil {
		return nil, err
	}
	// mountinfo shows resolved paths: compare with those.
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, err
	}
	lock, err := lockStateDir(dir, c.lockWait)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:        c,
		sys:        sys,
		log:        c.Log,
		mountsDir:  filepath.Join(dir, "mounts"), // HostPath agrees
		stateDir:   filepath.Join(dir, "state"),
		secretsDir: filepath.Join(dir, "secrets"),
		lock:       lock,
		entries:    make(map[string]*entry),

		reconfigured: make(chan struct{}),
	}
	if err := m.prepare(); err != nil {
		lock.Close()
		return nil, err
	}
	return m, nil
}

func (m *Manager) prepare() error {
	root := filepath.Dir(m.stateDir)
	for _, d := range []string{m.mountsDir, m.stateDir, m.secretsDir, filepath.Join(root, "locks")} {
		if err := mkdirPrivate(d); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.lockWait)
	err := makeSharedLocked(ctx, m.sys, root, m.mountsDir) // a hook may be at it too
	cancel()
	if err != nil {
		return err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if err := m.adopt(); err != nil {
		m.cancel()
		return err
	}
	m.startProber()
	return nil
}

func (m *Manager) newEntry(s netspec.Spec) *entry {
	key := s.Key()
	return &entry{
		spec:     s,
		key:      key,
		dir:      key,
		hostPath: filepath.Join(m.mountsDir, key),
		unit:     unitFor(key),
		users:    make(map[string]struct{}),
		changed:  make(chan struct{}),
		retryNow: make(chan struct{}, 1),
	}
}

func (m *Manager) logFor(e *entry) *logrus.Entry {
	return m.log.WithFields(logrus.Fields{"mount": e.key, "spec": e.spec.String()})
}

// Close stops all background work (a mount attempt under way is killed) and waits for it. It
// does not unmount: the mounts outlive the agent by design, and the next agent adopts them.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	for _, e := range m.entries {
		m.stopGraceLocked(e)
		e.broadcast()
	}
	m.cancel()
	m.mu.Unlock()
	m.wg.Wait()
	m.lock.Close() // releases the flock
}
