package nri

import (
	"time"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/subpath/liveupdate"
)

// Status is what `mountkeeper status` shows of a running plugin.
type Status struct {
	Connected  bool          `json:"connected"`
	Classes    []string      `json:"classes"`
	ConfigFrom string        `json:"configFrom"`
	LastReload *ReloadResult `json:"lastReload,omitempty"`
	// NetworkMounts are the network filesystems the plugin holds on the host.
	NetworkMounts []NetworkMount `json:"networkMounts,omitempty"`
	// StuckCalls counts, by server (host:port), the agent's probes of network mounts that did
	// not answer and still run: each is a thread in uninterruptible sleep until its server
	// answers. At most one per server of a kernel client (NFS, CIFS, Ceph).
	StuckCalls map[string]int `json:"stuckCalls,omitempty"`
	// LiveSubPaths are the live subPath copies: how many are followed, the old versions still
	// held open (retiredCopies, retiredBytes: charged to their pods until freed) and the
	// updates so far by result.
	LiveSubPaths *liveupdate.LiveStatus `json:"liveSubPaths,omitempty"`
}

// NetworkMount is one network filesystem mounted on the host (netmount.MountStatus, which cmd
// translates: nri does not import netmount).
type NetworkMount struct {
	Key                 string     `json:"key"`
	Spec                string     `json:"spec"` // secrets redacted
	HostPath            string     `json:"hostPath"`
	State               string     `json:"state"` // mounting, checking, mounted, dead, recovering, unmounting, idle
	Users               int        `json:"users"`
	Scope               string     `json:"scope"`
	Classes             []string   `json:"classes,omitempty"`
	Attempt             int        `json:"attempt,omitempty"`
	LastError           string     `json:"lastError,omitempty"`
	Since               time.Time  `json:"since"`
	Deaths              int        `json:"deaths"`
	Recoveries          int        `json:"recoveries"`
	LastDeath           *time.Time `json:"lastDeath,omitempty"`
	LastRecovery        *time.Time `json:"lastRecovery,omitempty"`
	LastRecoverySeconds float64    `json:"lastRecoverySeconds,omitempty"`
}

// MountReporter is a Mounter that reports the mounts it holds, for Status.
type MountReporter interface {
	NetworkMounts() []NetworkMount
	StuckCalls() map[string]int
}

// ReloadResult is the outcome of the last config reload.
type ReloadResult struct {
	At      time.Time `json:"at"`
	Applied bool      `json:"applied"`
	Error   string    `json:"error,omitempty"`
}

// Status reports the plugin's state.
func (p *Plugin) Status() Status {
	p.mu.RLock()
	st := Status{Connected: p.connected.Load(), Classes: p.cfg.ClassNames(), ConfigFrom: p.configFrom, LastReload: p.lastReload}
	net := p.net
	p.mu.RUnlock()
	if r, ok := net.(MountReporter); ok {
		st.NetworkMounts, st.StuckCalls = r.NetworkMounts(), r.StuckCalls()
	}
	st.LiveSubPaths = p.liveStatus()
	return st
}

// ReloadConfig parses data, the new content of the config file at from, and puts it in force;
// an invalid config is refused, logged and counted, and the config in force stays.
//
// Reloads run one at a time (a SIGHUP and a file change may come together), so that LastReload
// is the outcome of the last one; apply serialises each with Configure.
func (p *Plugin) ReloadConfig(data []byte, from string) error {
	p.reloadMu.Lock()
	defer p.reloadMu.Unlock()
	cfg, err := configs.Parse(data)
	if err == nil {
		err = p.Reload(cfg)
	}
	res := &ReloadResult{At: time.Now(), Applied: err == nil}
	if err != nil {
		res.Error = err.Error()
		p.log.WithField("config", from).Errorf("config reload refused, the previous config stays in force: %v", err)
	} else {
		p.log.WithField("config", from).Infof("config reloaded: runtime classes %v", cfg.ClassNames())
	}
	p.metrics.Reload(err == nil)
	p.mu.Lock()
	p.lastReload = res
	p.mu.Unlock()
	return err
}

// WithConfigSource records where the config came from, for Status.
func WithConfigSource(from string) Option {
	return func(p *Plugin) { p.configFrom = from }
}

// StateDir is the state dir of the config in force (the guard's refusals are recorded there).
func (p *Plugin) StateDir() string { return p.config().StateDir }
