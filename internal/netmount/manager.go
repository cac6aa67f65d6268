package netmount

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// Defaults of Config.
const (
	DefaultUnmountTimeout = 10 * time.Second
	DefaultRetryBackoff   = time.Second
	// MaxRetryBackoff caps the doubling delay between mount attempts.
	MaxRetryBackoff = 30 * time.Second
	// ProbeTimeout bounds the stat that checks a mount found at start-up.
	ProbeTimeout = 2 * time.Second
	// DefaultLockWait is how long NewManager waits for another Manager (an agent being
	// replaced) to release the state directory.
	DefaultLockWait = 10 * time.Second
	// DefaultFirstWait is Config.FirstWait's default: a third of configs.DefaultCreateBudget.
	DefaultFirstWait = configs.DefaultCreateBudget / 3
)

// Config configures a Manager. Zero values take the defaults.
type Config struct {
	// StateDir holds the host mounts, at StateDir/mounts/<key>, and their state, at
	// StateDir/state/<key>.json. Default /var/lib/mountkeeper.
	StateDir string
	// MountTimeout bounds one mount attempt; the helper's process group is killed after it.
	// Default 30s.
	MountTimeout time.Duration
	// UnmountTimeout bounds umount; it is followed by umount -l, bounded the same. Default 10s.
	UnmountTimeout time.Duration
	// Grace is how long a mount stays after its last user is released. Default 30s.
	Grace time.Duration
	// RetryBackoff is the delay before the first retry of a failed mount; it doubles with
	// every failure, up to MaxRetryBackoff. Default 1s.
	RetryBackoff time.Duration
	// Scoper runs the mount helpers; nil means DetectScoper().
	Scoper Scoper
	// Env is what Preflight reads; nil means LiveEnv{}.
	Env Env
	// Log receives what happens to the mounts; nil means logrus.StandardLogger().
	Log *logrus.Logger
	// Wanted are the network mounts of the current config. At start-up every live mount is
	// adopted (adopt.go); one that stands for none of these serves no new container and goes
	// once no running container uses it.
	Wanted []netspec.Spec
	// ProbeInterval is how often each mounted filesystem is probed; a dead one is replaced
	// under the running containers (heal.go). 0: not probed.
	ProbeInterval time.Duration
	// Uses are the class mounts of each network mount, by key: for the logs of a death.
	Uses map[string][]Use
	// FirstWait is how long after a mount's first attempt began (or the check of a mount
	// found at start-up) Acquire may still wait for it; in every other state that is not
	// mounted Acquire answers at once. The runtime creates containers under one node-wide
	// lock, so a wait in Acquire holds every container of the node. Default DefaultFirstWait.
	FirstWait time.Duration

	lockWait time.Duration // how long NewManager waits for StateDir's lock; tests shorten it
}

// ConfigFrom is the Manager config that a mountkeeper config asks for; its Wanted mounts are
// the network mounts of every class.
func ConfigFrom(c *configs.Config, log *logrus.Logger) Config {
	var wanted []netspec.Spec
	uses := make(map[string][]Use)
	for _, name := range c.ClassNames() {
		wanted = append(wanted, c.RuntimeClasses[name].NetworkSpecs()...)
		for _, cm := range c.RuntimeClasses[name].Mounts {
			if cm.Network != nil {
				uses[cm.Network.Key()] = append(uses[cm.Network.Key()], Use{Class: name, Propagation: string(cm.Bind.Propagation)})
			}
		}
	}
	return Config{StateDir: c.StateDir, MountTimeout: c.MountTimeout, Grace: c.UnmountGrace, Log: log, Wanted: wanted,
		ProbeInterval: c.ProbeInterval, Uses: uses, FirstWait: c.CreateBudget / 3}
}

// withDefaults fills in what a Config built by hand (tests) leaves out; the defaults a config
// file may leave out are configs' own.
func (c Config) withDefaults() Config {
	if c.StateDir == "" {
		c.StateDir = configs.DefaultStateDir
	}
	if c.MountTimeout <= 0 {
		c.MountTimeout = configs.DefaultMountTimeout
	}
	if c.UnmountTimeout <= 0 {
		c.UnmountTimeout = DefaultUnmountTimeout
	}
	if c.Grace <= 0 {
		c.Grace = configs.DefaultUnmountGrace
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.FirstWait <= 0 {
		c.FirstWait = DefaultFirstWait
	}
	if c.Env == nil {
		c.Env = LiveEnv{}
	}
	if c.Log == nil {
		c.Log = logrus.StandardLogger()
	}
	if c.lockWait <= 0 {
		c.lockWait = DefaultLockWait
	}
	return c
}

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

	phase     phase
	users     map[string]struct{}
	changed   chan struct{} // closed and replaced on every change, for waiters
	since     time.Time     // start of the current phase's attempt or check
	attempt   int
	retryAt   time.Time // set while waiting to retry after a failure
	lastErr   error
	mountedAt time.Time
	wanted    bool // asked for while unmounting: mount again afterwards

	graceGen   int // bumping it disarms a pending grace timer
	graceTimer *time.Timer

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
	}
}

func (m *Manager) logFor(e *entry) *logrus.Entry {
	return m.log.WithFields(logrus.Fields{"mount": e.key, "spec": e.spec.String()})
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
// unmounted lazily and mounted again, and one that does not answer is kept (see probe).
func (m *Manager) checkAdopted(e *entry) {
	defer m.wg.Done()
	var err error
	if _, heals := m.sys.(healer); heals {
		if err = m.health(e); err != nil {
			m.mu.Lock()
			if !m.closed {
				m.deadLocked(e, fmt.Errorf("found dead at start-up: %w", err))
			}
			m.mu.Unlock()
			return
		}
	} else {
		err = m.probe(e)
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

// graceIfUnusedLocked starts the grace period of a mount that has just become ready with no
// users, once the plugin has claimed the running containers' mounts (see synced): a mount
// ensured for a pod whose containers never come, or remounted at start-up for nobody, goes.
func (m *Manager) graceIfUnusedLocked(e *entry) {
	if m.synced && len(e.users) == 0 && e.graceTimer == nil {
		m.startGraceLocked(e)
	}
}

// probe checks that the mount at e.hostPath answers; it unmounts it lazily if it does not. A
// timeout is not an error.
func (m *Manager) probe(e *entry) error {
	err := m.sys.probe(e.hostPath)
	if err == nil || errors.Is(err, bounded.ErrNoAnswer) {
		if err != nil {
			m.logFor(e).WithError(err).Warn("netmount: mount does not answer; keeping it")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.UnmountTimeout)
	defer cancel()
	if uerr := m.sys.unmount(ctx, e.hostPath, true); uerr != nil {
		return fmt.Errorf("%w; and its lazy unmount failed: %v", err, uerr)
	}
	return err
}

// Ensure starts mounting s in the background unless it is mounted or being mounted. It never
// blocks. Call it early: when a pod of a class with network mounts is created, and at start-up
// for the running pods, so that the mount is ready when the containers come.
func (m *Manager) Ensure(s netspec.Spec) {
	if err := s.Validate(); err != nil {
		m.log.WithError(err).WithField("spec", s.String()).Error("netmount: invalid network mount")
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.ensureLocked(s)
	}
}

func (m *Manager) ensureLocked(s netspec.Spec) *entry {
	e := m.entries[s.Key()]
	if e == nil {
		e = m.newEntry(s)
		m.entries[e.key] = e
	}
	e.spec = s
	if e.retired { // a mount of s's key after all, found at start-up: check it as any
		m.unretireLocked(e)
	}
	switch e.phase {
	case idle:
		m.startMountLocked(e)
	case unmounting:
		e.wanted = true
	}
	return e
}

func (m *Manager) startMountLocked(e *entry) {
	e.phase, e.attempt, e.lastErr, e.retryAt = mounting, 0, nil, time.Time{}
	e.broadcast()
	m.wg.Add(1)
	go m.mountLoop(e)
}

// mountLoop tries to mount e until it is mounted or the Manager is closed, waiting
// RetryBackoff (doubling, at most MaxRetryBackoff) between attempts.
func (m *Manager) mountLoop(e *entry) {
	m.retryLoop(e, retry{
		maxBackoff: MaxRetryBackoff,
		begin:      func() {},
		try:        func(int) error { return m.mountOnce(e) },
		succeeded: func(attempt int) func() {
			log := m.logFor(e).WithFields(logrus.Fields{"attempt": attempt, "took": e.mountedAt.Sub(e.since).Round(time.Millisecond)})
			return func() { log.Info("netmount: mounted") }
		},
		failed: func(attempt int, err error, retryIn time.Duration) func() {
			e.lastErr = err
			log := m.logFor(e).WithError(err).WithFields(logrus.Fields{"attempt": attempt, "retry_in": retryIn})
			return func() { log.Warn("netmount: mount failed") }
		},
	})
}

// retry is one kind of retried work on an entry, for retryLoop. begin, succeeded and failed
// run with m.mu held; the last two return the log line to write once it is released.
type retry struct {
	maxBackoff time.Duration
	begin      func()                  // before each attempt (the entry's phase)
	try        func(attempt int) error // the attempt, without the lock
	succeeded  func(attempt int) func()
	failed     func(attempt int, err error, retryIn time.Duration) func() // sets e.lastErr
}

// retryLoop runs r.try on e until it succeeds or the Manager is closed, waiting RetryBackoff
// (doubling, at most r.maxBackoff) between attempts, and keeps e's attempt, times and phase
// for Status and Acquire's waiters (broadcast after every change).
func (m *Manager) retryLoop(e *entry, r retry) {
	defer m.wg.Done()
	backoff := m.cfg.RetryBackoff
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return
		}
		r.begin()
		e.attempt++
		e.since, e.retryAt = time.Now(), time.Time{}
		e.broadcast()
		attempt := e.attempt
		m.mu.Unlock()

		err := r.try(attempt)

		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return
		}
		if err == nil {
			e.phase, e.lastErr, e.mountedAt = mounted, nil, time.Now()
			logLine := r.succeeded(attempt)
			m.graceIfUnusedLocked(e)
			e.broadcast()
			m.mu.Unlock()
			logLine()
			return
		}
		logLine := r.failed(attempt, err, backoff)
		e.retryAt = time.Now().Add(backoff)
		e.broadcast()
		m.mu.Unlock()
		logLine()

		select {
		case <-m.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, r.maxBackoff)
	}
}

// prepareMount is what every mount attempt (first mount or heal) starts with: the preflight,
// then the key's lock, which a hook (EnsureMounted) mounting the same spec takes too.
func (m *Manager) prepareMount(e *entry) (unlock func(), err error) {
	if err := m.sys.preflight(e.spec); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(m.ctx, m.cfg.MountTimeout)
	defer cancel()
	return lockKey(lctx, filepath.Dir(m.stateDir), e.key)
}

// mountOnce makes one attempt: preflight, then mount(8) in the mount's scope, bounded by
// MountTimeout. A live mount already at the host path (an agent died between mounting and
// writing the state) is taken over.
func (m *Manager) mountOnce(e *entry) error {
	unlock, err := m.prepareMount(e)
	if err != nil {
		return err
	}
	defer unlock()
	already, err := m.sys.isMounted(e.hostPath)
	if err != nil {
		return err
	}
	if already {
		if err := m.probe(e); err == nil {
			m.logFor(e).Info("netmount: a live mount without state is at the host path: taking it over")
			return m.saveState(e)
		}
	}
	if err := os.Mkdir(e.hostPath, 0o700); errors.Is(err, fs.ErrExist) {
		err = os.Chmod(e.hostPath, 0o700) // an earlier agent made it 0755; nothing is mounted on it
	}
	if err != nil {
		return err
	}
	cmdSpec, err := writeSecretFile(m.secretsDir, e.spec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.MountTimeout)
	defer cancel()
	if err := m.sys.mount(ctx, cmdSpec, e.unit, e.hostPath, m.cfg.MountTimeout); err != nil {
		m.cleanFailedAttempt(e)
		return redactError(e.spec, err)
	}
	return m.saveState(e)
}

// cleanFailedAttempt kills what a failed attempt left in the mount's scope, unless the
// attempt mounted after all, and removes the scope.
func (m *Manager) cleanFailedAttempt(e *entry) {
	if mounted, err := m.sys.isMounted(e.hostPath); err != nil || mounted {
		return
	}
	if err := m.sys.killScope(e.unit); err != nil {
		m.logFor(e).WithError(err).Warn("netmount: cannot kill what the failed mount attempt left running")
	}
	var err error
	for range 20 {
		if err = m.sys.removeScope(e.unit); err == nil {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	m.logFor(e).WithError(err).Debug("netmount: scope of the failed mount attempt not removed")
}

func (m *Manager) saveState(e *entry) error {
	if err := writeState(m.stateDir, e.dir, newState(e.spec, e.hostPath)); err != nil {
		// The mount is live and usable; only its adoption after a restart is at stake.
		m.logFor(e).WithError(err).Error("netmount: cannot write the mount's state: a restarted agent will not adopt it")
	}
	return nil
}

// Acquire records user (a container ID) as one of the users of s and returns the host path of
// the mount, if s is mounted. Otherwise it answers "<spec>: not ready: ..." (the attempt under
// way and since when, or the last error) while the mount goes on in the background, so that
// the kubelet's retry succeeds; it waits only for a mount's first attempt (or the check of a
// mount found at start-up), and only until FirstWait after it began or ctx is done: a server
// that does not answer costs one short wait, not one per container. The runtime creates every
// container of the node under one lock while its plugin decides (see FirstWait).
func (m *Manager) Acquire(ctx context.Context, s netspec.Spec, user string) (string, error) {
	if err := s.Validate(); err != nil {
		return "", fmt.Errorf("%s: %w", s, err)
	}
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return "", fmt.Errorf("%s: not ready: the mount manager is closed", s)
		}
		e := m.ensureLocked(s)
		if e.phase == mounted {
			e.users[user] = struct{}{}
			m.stopGraceLocked(e)
			path := e.hostPath
			m.mu.Unlock()
			return path, nil
		}
		until := m.waitUntilLocked(e)
		if !time.Now().Before(until) || ctx.Err() != nil {
			err := m.notReadyLocked(e)
			m.mu.Unlock()
			return "", err
		}
		changed := e.changed
		m.mu.Unlock()
		timer := time.NewTimer(time.Until(until))
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-changed:
		}
		timer.Stop()
	}
}

// waitUntilLocked is until when Acquire may wait for e to be mounted: FirstWait after its
// first mount attempt began, or the check of a mount found at start-up; never after a failed
// attempt, a death, or during an unmount (the zero time).
func (m *Manager) waitUntilLocked(e *entry) time.Time {
	switch {
	case e.phase == mounting && e.attempt == 0:
		return time.Now().Add(m.cfg.FirstWait) // just started: mountLoop begins attempt 1 at once
	case e.phase == mounting && e.attempt == 1 && e.lastErr == nil, e.phase == checking:
		return e.since.Add(m.cfg.FirstWait)
	}
	return time.Time{}
}

// Hold records user as using s without waiting for the mount, and starts mounting s if it is
// neither mounted nor being mounted. It is for containers that already run when the agent
// starts: their bind was made earlier, and a mount still being checked or re-mounted must not
// reach its grace period while they use it. It never blocks.
func (m *Manager) Hold(s netspec.Spec, user string) {
	if err := s.Validate(); err != nil {
		m.log.WithError(err).WithField("spec", s.String()).Error("netmount: invalid network mount")
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	e := m.ensureLocked(s)
	e.users[user] = struct{}{}
	m.stopGraceLocked(e)
}

func (m *Manager) notReadyLocked(e *entry) error {
	ago := func(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }
	switch {
	case e.phase == mounting && e.lastErr != nil && !e.retryAt.IsZero():
		return fmt.Errorf("%s: not ready: last error: %w (attempt %d; next attempt in %s)",
			e.spec, e.lastErr, e.attempt, time.Until(e.retryAt).Round(time.Millisecond))
	case e.phase == mounting && e.lastErr != nil:
		return fmt.Errorf("%s: not ready: last error: %w (attempt %d under way since %s)",
			e.spec, e.lastErr, e.attempt, ago(e.since))
	case e.phase == mounting:
		var hint string
		if time.Since(e.since) >= m.cfg.FirstWait {
			server := "the server"
			if addr, err := e.spec.ServerAddress(); err == nil {
				server += " " + addr
			}
			hint = fmt.Sprintf(": %s has not answered yet: check that it is up and answers from this node; "+
				"the mount goes on in the background, and a container created once it is mounted gets it", server)
		}
		return fmt.Errorf("%s: not ready: still mounting (attempt %d, started %s ago, at %s)%s",
			e.spec, e.attempt, ago(e.since), e.since.Format(time.RFC3339), hint)
	case e.phase == checking:
		return fmt.Errorf("%s: not ready: checking the mount found at start-up (since %s)", e.spec, ago(e.since))
	case e.phase == unmounting:
		return fmt.Errorf("%s: not ready: being unmounted after its grace period; it will be mounted again", e.spec)
	case e.phase == dead || e.phase == recovering:
		return fmt.Errorf("%s: not ready: %w (recovery attempt %d, dead since %s)", e.spec, e.lastErr, e.attempt, ago(e.heal.deadSince))
	}
	return fmt.Errorf("%s: not ready (%s)", e.spec, e.phase)
}

// Release drops user from every mount it uses. A mount left without users is unmounted after
// Grace, unless it is acquired again meanwhile.
func (m *Manager) Release(user string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if _, ok := e.users[user]; !ok {
			continue
		}
		delete(e.users, user)
		if len(e.users) == 0 && e.phase == mounted {
			m.startGraceLocked(e)
		}
	}
}

// ReleaseUnused starts the grace period of every mount that has no user: mounts adopted at
// start-up or ensured for a pod but never acquired. The plugin calls it once it has acquired
// the mounts of all running containers after a start, and may call it when a pod goes away.
func (m *Manager) ReleaseUnused() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.synced = true
	for _, e := range m.entries {
		if len(e.users) == 0 && e.phase == mounted && e.graceTimer == nil {
			m.startGraceLocked(e)
		}
	}
}

func (m *Manager) startGraceLocked(e *entry) {
	m.stopGraceLocked(e)
	if m.closed {
		return
	}
	gen := e.graceGen
	e.graceTimer = time.AfterFunc(m.cfg.Grace, func() { m.graceOver(e, gen) })
	m.logFor(e).WithField("grace", m.cfg.Grace).Debug("netmount: no users left: unmounting after the grace period")
}

func (m *Manager) stopGraceLocked(e *entry) {
	if e.graceTimer != nil {
		e.graceTimer.Stop()
		e.graceTimer = nil
	}
	e.graceGen++
}

func (m *Manager) graceOver(e *entry, gen int) {
	m.mu.Lock()
	if m.closed || gen != e.graceGen || len(e.users) > 0 || e.phase != mounted || m.entries[e.key] != e {
		m.mu.Unlock()
		return
	}
	e.graceTimer = nil
	e.phase, e.since, e.wanted = unmounting, time.Now(), false
	e.broadcast()
	m.wg.Add(1)
	m.mu.Unlock()
	m.unmount(e)
}

// unmount unmounts e (umount, then umount -l if that does not finish within UnmountTimeout),
// removes its state, host directory and scope.
func (m *Manager) unmount(e *entry) {
	defer m.wg.Done()
	log := m.logFor(e)
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.UnmountTimeout)
	err := m.sys.unmount(ctx, e.hostPath, false)
	cancel()
	if errors.Is(err, bounded.ErrNoAnswer) && m.ctx.Err() == nil {
		log.WithError(err).Warn("netmount: unmount did not finish in time: unmounting lazily")
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
