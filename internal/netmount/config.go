package netmount

import (
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
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

// Reconfigure puts in force the settings of a reloaded config (ConfigFrom) in the running
// Manager: a config reload changes how the network mounts are run, not only which ones the
// plugin asks for. From the call on:
//   - MountTimeout bounds every mount attempt that starts, first mounts and heals alike;
//   - Grace is the grace period of every mount without users, those already waiting
//     included: each goes once the new Grace has passed since its last user left;
//   - ProbeInterval paces the prober from the next probe (0 stops it, a value starts it);
//   - FirstWait bounds Acquire's waits; Uses names the class mounts in Status and in the log
//     of a death; Wanted is what a mount found later is checked against.
//
// StateDir cannot change in a running Manager (it holds its lock, and its mounts are bound
// into running containers): a new one is logged and takes effect at the next start. The
// Manager's own settings (Scoper, Env, UnmountTimeout, RetryBackoff, Log) stay.
func (m *Manager) Reconfigure(c Config) {
	c = c.withDefaults()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	if c.StateDir != m.cfg.StateDir {
		m.log.WithField("stateDir", c.StateDir).Warnf("netmount: the network mounts stay in %s until the agent restarts: a running agent cannot move them", m.cfg.StateDir)
	}
	graceChanged, probeChanged := c.Grace != m.cfg.Grace, c.ProbeInterval != m.cfg.ProbeInterval
	m.cfg.MountTimeout, m.cfg.Grace, m.cfg.ProbeInterval = c.MountTimeout, c.Grace, c.ProbeInterval
	m.cfg.FirstWait, m.cfg.Uses, m.cfg.Wanted = c.FirstWait, c.Uses, c.Wanted
	// The same config again (an NRI reconnect puts the config in force anew) leaves the grace
	// timers and the prober's pace alone.
	if graceChanged {
		for _, e := range m.entries {
			if e.graceTimer != nil {
				m.armGraceLocked(e, max(0, c.Grace-time.Since(e.graceSince)))
			}
		}
	}
	if probeChanged {
		close(m.reconfigured)
		m.reconfigured = make(chan struct{})
	}
}

// config is a copy of the Manager's config, for work that runs without m.mu (Reconfigure
// changes it).
func (m *Manager) config() Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}
