package nri

import (
	"context"
	"path/filepath"
	"slices"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/metrics"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/internal/subpath/liveupdate"
)

// Live subPath updates: the Follower of the copies in force makes the copies the
// engine marked live follow their volume, from CreateContainer (their path becomes a mount
// point of its own, before the runtime binds it) and PostStartContainer (the runtime bound
// it: updates may go on) to StopContainer or RemoveContainer.

// liveStateFile is where the live copies are recorded, below the state dir (not on the copy
// tmpfs: paths only, no content).
const liveStateFile = "subpath-live.json"

// followerFor is the Follower of next, the copies of the config being applied: the one in
// force when it follows the same directory (it goes on with its copies), else a new one, the
// old one closed. Callers hold p.mu.
func (p *Plugin) followerForLocked(cfg *configs.Config, next *copies.Copies) *liveupdate.Follower {
	old := p.follower
	switch {
	case next == nil:
	case old != nil && old.Dir() == next.Dir:
		old.UseCopies(next)
		return old
	}
	if old != nil {
		go old.Close() // not under p.mu: it waits for its workers
	}
	if next == nil {
		return nil
	}
	return liveupdate.NewFollower(next, filepath.Join(cfg.StateDir, liveStateFile), p.liveUpdated)
}

func (p *Plugin) liveFollower() *liveupdate.Follower {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.follower
}

// liveUpdated logs and counts one update of a live copy.
func (p *Plugin) liveUpdated(u liveupdate.Update) {
	p.live.Count(u.Result)
	log := p.log.WithFields(logrus.Fields{"container": u.Container, "volume": u.Copy.Target.Volume, "subPath": u.Copy.SubPath, "result": u.Result})
	if u.Err != nil {
		log.Warnf("live subPath %s: update not applied, the container keeps the content it has: %v", u.Copy.Target.Path, u.Err)
		return
	}
	log.WithField("version", u.Version).Infof("live subPath %s: updated", u.Copy.Target.Path)
}

// trackLive starts following the live copies of decision d; a copy that cannot be made live
// stays static (its mount keeps kubelet's propagation) and is logged.
func (p *Plugin) trackLive(log *logrus.Entry, id string, d *engine.Decision) {
	for _, n := range d.LiveNotes {
		log.Warn(n)
	}
	if !slices.ContainsFunc(d.Copies, func(c copies.Copy) bool { return c.Live }) {
		return
	}
	f := p.liveFollower()
	if f == nil {
		return
	}
	failed := f.Track(id, d.Copies)
	for i := range d.Copies {
		c := &d.Copies[i]
		if err, ok := failed[c.Path]; ok {
			c.Live = false
			log.WithField("volume", c.Target.Volume).Warnf("subPath mount %s stays fixed at start: cannot make it follow updates: %v", c.Target.Path, err)
		}
	}
}

// PostStartContainer lets the container's live copies follow updates: its runtime bound them.
func (p *Plugin) PostStartContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	defer p.requests.end(reqPostStartContainer, p.requests.begin(reqPostStartContainer))
	if f := p.liveFollower(); f != nil {
		f.Arm(ctr.GetId(), ctr.GetPid())
	}
	return nil
}

// StopContainer stops following the container's live copies (their mounts stay until
// RemoveContainer removes the copies).
func (p *Plugin) StopContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	defer p.requests.end(reqStopContainer, p.requests.begin(reqStopContainer))
	if f := p.liveFollower(); f != nil {
		f.Stop(ctr.GetId())
	}
	return nil, nil
}

// liveStatus is what status and metrics show of the live copies.
func (p *Plugin) liveStatus() *liveupdate.LiveStatus {
	f := p.liveFollower()
	if f == nil {
		return nil
	}
	st := f.Status()
	return &st
}

// withLiveMetrics registers the live copies' collectors with m.
func (p *Plugin) withLiveMetrics(m *metrics.Metrics) {
	p.live = metrics.NewLiveSubPaths(liveupdate.UpdateResults, func() (int, int64) {
		st := p.liveStatus()
		if st == nil {
			return 0, 0
		}
		return st.Paths, st.RetiredBytes
	})
	for _, c := range p.live.Collectors() {
		m.Register(c)
	}
}
