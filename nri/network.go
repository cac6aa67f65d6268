package nri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// Mounter mounts network filesystems on the host and shares them among containers
// (netmount.Manager).
type Mounter interface {
	Ensure(netspec.Spec)
	Acquire(ctx context.Context, s netspec.Spec, user string) (string, error)
	Hold(s netspec.Spec, user string)
	// HoldSources holds, for user, every mount one of sources lies in (whatever made it) and
	// says how many.
	HoldSources(user string, sources []string) int
	Release(user string)
	ReleaseUnused()
}

// Reconfigurer is a Mounter that takes the settings of every config put in force after the
// one it was made with (netmount.Manager.Reconfigure: timeouts, probe interval, grace), so
// that a reload changes how the network mounts are run, not only which ones are asked for.
type Reconfigurer interface {
	Reconfigure(*configs.Config)
}

// WithMounter sets how the plugin makes its Mounter, the first time a config has network
// mounts. cmd passes a netmount.Manager; tests a fake.
func WithMounter(newMounter func(*configs.Config) (Mounter, error)) Option {
	return func(p *Plugin) { p.newMounter = newMounter }
}

// WithMountsLeftBehind sets how the plugin learns that an earlier agent left network mounts in
// a config's state directory (netmount.LeftBehind): with a config that has none of its own,
// the plugin then makes its Mounter all the same, which adopts them and releases each once
// no running container uses it, instead of leaving them mounted for ever.
func WithMountsLeftBehind(left func(*configs.Config) bool) Option {
	return func(p *Plugin) { p.mountsLeft = left }
}

// makeMounter makes the Mounter for cfg, the first config with network mounts.
func (p *Plugin) makeMounter(cfg *configs.Config) (Mounter, error) {
	if p.newMounter == nil {
		return nil, fmt.Errorf("the config has network filesystem mounts, but this plugin was built without a mounter")
	}
	m, err := p.newMounter(cfg)
	if err != nil {
		return nil, fmt.Errorf("start the network filesystem mounter: %w", err)
	}
	return m, nil
}

// eagerUser holds the network mounts of the classes with `networkMount: eager`: a user that is no
// container (container IDs are hex), so no RemoveContainer releases it.
const eagerUser = "mountkeeper:eager"

// holdEager mounts the network filesystems of cfg's classes with `networkMount: eager` now, in
// the background, and keeps them mounted for as long as the config says so, with or without
// containers: the first container of such a class finds its mount ready and costs what any
// container costs. Mounts of classes no longer eager begin their grace period (Release, then
// Hold again for those still eager: a grace timer started by one is stopped by the other, long
// before it could end). held says an earlier config may have held some.
func holdEager(net Mounter, cfg *configs.Config, held bool) {
	if net == nil {
		return
	}
	if held {
		net.Release(eagerUser)
	}
	for _, name := range cfg.ClassNames() {
		if rc := cfg.RuntimeClasses[name]; rc.Eager() {
			for _, s := range rc.NetworkSpecs() {
				net.Hold(s, eagerUser)
			}
		}
	}
}

// mounter is the Mounter, or nil while no config had network mounts.
func (p *Plugin) mounter() Mounter {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.net
}

// acquireBudget bounds the wait of CreateContainer for network mounts: most of createBudget,
// leaving room for the checks after it, so that a mount not ready fails with its own "not
// ready: last error ..." rather than the overall budget's message. The Mounter waits far less
// (netmount: only for a first attempt, a third of createBudget at most): the runtime holds
// every container creation of the node while the plugin answers one.
func acquireBudget(createBudget time.Duration) time.Duration {
	return max(createBudget*4/5, createBudget-300*time.Millisecond)
}

// mounterNetwork is how the engine gets the host path of a network mount in the plugin: a
// mount not ready (still mounting past its first short wait, retrying, dead, hung) fails the
// container at once with "not ready" while it goes on mounting or healing, and the kubelet's
// retry finds it ready; the runtime's request timeout (2s by default, after which the
// container is created WITHOUT the plugin's mounts) is never reached.
type mounterNetwork struct{ m Mounter }

func (n mounterNetwork) HostPath(ctx context.Context, s netspec.Spec, user string) (string, error) {
	return n.m.Acquire(ctx, s, user)
}

func (n mounterNetwork) Release(user string) { n.m.Release(user) }

// release drops what the plugin holds for a container: its network mount claims and its
// subPath copies.
func (p *Plugin) release(ctrID string) {
	if net := p.mounter(); net != nil {
		net.Release(ctrID)
	}
	if f := p.liveFollower(); f != nil {
		f.Stop(ctrID)
	}
	if c := p.subPathCopies(); c != nil {
		if err := c.Remove(ctrID); err != nil {
			p.log.WithField("container", ctrID).Warnf("remove the subPath copies: %v", err)
		}
	}
}

// RunPodSandbox starts the network mounts of the pod's class right away: mounting takes
// longer than a CreateContainer request may, and the pod's containers come only after
// the image pulls.
func (p *Plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	defer p.requests.end(reqRunPodSandbox, p.requests.begin(reqRunPodSandbox))
	p.ensure(pod.GetRuntimeHandler())
	return nil
}

func (p *Plugin) ensure(handler string) {
	net := p.mounter()
	if net == nil {
		return
	}
	_, rc, ok := p.config().Class(handler)
	if !ok {
		return
	}
	for _, s := range rc.NetworkSpecs() {
		net.Ensure(s)
	}
}

// RemoveContainer drops the container's claim on its network mounts; the last one out starts
// the unmount grace period.
func (p *Plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	defer p.requests.end(reqRemoveContainer, p.requests.begin(reqRemoveContainer))
	p.release(ctr.GetId())
	return nil
}

// Synchronize rebuilds the network mounts' users from the runtime's containers when the plugin
// (re)connects: mounts found on the node are adopted, not mounted again, and mounts of running
// pods are started. A running container holds, at once, the host mounts its own OCI mounts
// come from (HoldSources): what it uses, whatever the config says now (a class renamed or
// removed, a spec changed while the plugin was away) and whatever agent made them. One with
// none of them (created while the plugin was away, or before any mount of its class was
// made) holds its class's mounts by spec, without waiting for the adoption check or a
// remount. Only then do the mounts nobody uses begin their grace period.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	defer p.requests.end(reqSynchronize, p.requests.begin(reqSynchronize))
	p.syncMu.Lock() // a Synchronize the runtime cut may still be here
	defer p.syncMu.Unlock()
	p.syncNow(ctrs) // the subPath copies: the rest after answering (reconcile.go)
	if p.syncAnswered != nil {
		defer p.syncAnswered()
	}
	net := p.mounter()
	if net == nil {
		return nil, nil
	}
	handlers := make(map[string]string, len(pods))
	for _, pod := range pods {
		handlers[pod.GetId()] = pod.GetRuntimeHandler()
		p.ensure(pod.GetRuntimeHandler())
	}
	cfg := p.config()
	for _, ctr := range ctrs {
		if ctr.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		if net.HoldSources(ctr.GetId(), mountSources(ctr)) > 0 {
			continue
		}
		_, rc, ok := cfg.Class(handlers[ctr.GetPodSandboxId()])
		if !ok {
			continue
		}
		for _, s := range rc.NetworkSpecs() {
			net.Hold(s, ctr.GetId())
		}
	}
	net.ReleaseUnused()
	return nil, nil
}

// mountSources are the host paths of a container's mounts.
func mountSources(ctr *api.Container) []string {
	var out []string
	for _, m := range ctr.GetMounts() {
		out = append(out, m.GetSource())
	}
	return out
}
