package netmount

import (
	"slices"
	"strings"
	"time"
)

// MountStatus is one held network mount, as `mountkeeper status` shows it.
type MountStatus struct {
	Key      string   `json:"key"`
	Spec     string   `json:"spec"` // redacted
	HostPath string   `json:"hostPath"`
	State    string   `json:"state"` // idle, mounting, checking, mounted, dead, recovering, unmounting
	Users    int      `json:"users"`
	Scope    string   `json:"scope"`
	Classes  []string `json:"classes,omitempty"` // "class (propagation)"
	// Attempt is the mount or recovery attempt under way or last made.
	Attempt      int        `json:"attempt,omitempty"`
	LastError    string     `json:"lastError,omitempty"`
	Since        time.Time  `json:"since"` // mounted at, or start of the current phase
	Deaths       int        `json:"deaths"`
	Recoveries   int        `json:"recoveries"`
	LastDeath    *time.Time `json:"lastDeath,omitempty"`
	LastRecovery *time.Time `json:"lastRecovery,omitempty"`
	// LastRecoverySeconds is how long the last recovery took, from the death found to the new
	// mount in place.
	LastRecoverySeconds float64 `json:"lastRecoverySeconds,omitempty"`
}

// Totals count the deaths and recoveries of every mount a Manager held since it started:
// unlike the sums over Status, they do not drop when a mount is released. ForcedUnmounts and
// LazyUnmounts count the releases whose umount did not finish within UnmountTimeout and were
// escalated (unmount.go).
type Totals struct {
	Deaths, Recoveries, ForcedUnmounts, LazyUnmounts int
	// StuckCalls counts, by server ("host:port"), the probes that did not answer in time and
	// are still running now: each holds a thread of the agent in uninterruptible sleep until
	// its server answers. At most one per server of a kernel client (NFS, CIFS, Ceph), one per
	// mount of a FUSE one (see probeKey).
	StuckCalls map[string]int `json:"stuckCalls,omitempty"`
}

// Totals returns the Manager's deaths and recoveries so far, and its calls stuck now.
func (m *Manager) Totals() Totals {
	stuck := m.sys.stuckCalls()
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.totals
	if len(stuck) > 0 {
		t.StuckCalls = stuck
	}
	return t
}

// Status is a snapshot of the mounts the Manager holds, sorted by key.
func (m *Manager) Status() []MountStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]MountStatus, 0, len(m.entries))
	for _, e := range m.entries {
		st := MountStatus{
			Key: e.key, Spec: e.spec.String(), HostPath: e.hostPath, State: e.phase.String(),
			Users: len(e.users), Scope: m.scopeName(e.unit), Attempt: e.attempt,
			Deaths: e.heal.deaths, Recoveries: e.heal.recoveries, Since: e.since,
		}
		for _, u := range m.cfg.Uses[e.key] {
			st.Classes = append(st.Classes, u.Class+" ("+u.Propagation+")")
		}
		if e.phase == mounted {
			st.Since = e.mountedAt
		}
		if e.lastErr != nil {
			st.LastError = e.lastErr.Error()
		}
		if !e.heal.lastDeath.IsZero() {
			t := e.heal.lastDeath
			st.LastDeath = &t
		}
		if !e.heal.lastRecovery.IsZero() {
			t := e.heal.lastRecovery
			st.LastRecovery = &t
			st.LastRecoverySeconds = e.heal.lastTook.Seconds()
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b MountStatus) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func (m *Manager) scopeName(unit string) string {
	switch sc := m.cfg.Scoper.(type) {
	case *CgroupScoper:
		return sc.Dir(unit)
	case *SystemdScoper:
		return "mountkeeper-" + unit + "-*.scope"
	}
	return unit
}
