package nri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/netspec"
)

// Mounter mounts network filesystems on the host and shares them among containers
// (netmount.Manager).
type Mounter interface {
	Ensure(netspec.Spec)
	Acquire(ctx context.Context, s netspec.Spec, user string) (string, error)
	Hold(s netspec.Spec, user string)
	Release(user string)
	ReleaseUnused()
}

// WithMounter sets how the plugin makes its Mounter, the first time a config has network
// mounts. cmd passes a netmount.Manager; tests a fake.
func (p *Plugin) WithMounter(newMounter func(*configs.Config) (Mounter, error)) *Plugin {
	p.newMounter = newMounter
	return p
}

// startMounter makes the Mounter once a config needs one. It runs at Configure, so a node
// that cannot mount (no cgroup2, state dir not writable) fails the plugin's registration
// loudly instead of each container later.
func (p *Plugin) startMounter() error {
	cfg := p.config()
	if p.mounter() != nil || !cfg.HasNetworkMounts() {
		return nil
	}
	if p.newMounter == nil {
		return fmt.Errorf("the config has network filesystem mounts, but this plugin was built without a mounter")
	}
	m, err := p.newMounter(cfg)
	if err != nil {
		return fmt.Errorf("start the network filesystem mounter: %w", err)
	}
	p.mu.Lock()
	p.net = m
	p.mu.Unlock()
	return nil
}

// mounter is the Mounter, or nil while no config had network mounts.
func (p *Plugin) mounter() Mounter {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.net
}

// acquireBudget is how long CreateContainer waits for network mounts: most of createBudget,
// leaving room for the checks after it, so that a mount not ready fails with its own "not
// ready: last error ..." rather than the overall budget's message.
func acquireBudget(createBudget time.Duration) time.Duration {
	return max(createBudget*4/5, createBudget-300*time.Millisecond)
}

// mounterNetwork is how the engine gets the host path of a network mount in the plugin: it
// waits for the mount until the decision's context ends (acquireBudget), so the runtime's
// request timeout (2s by default, after which the container is created WITHOUT the plugin's
// mounts) is never reached; a mount that is not ready by then fails the container with "not
// ready" while it goes on mounting, and the kubelet's retry finds it ready.
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
	p.release(ctr.GetId())
	return nil
}

// Synchronize rebuilds the network mounts' users from the runtime's containers when the plugin
// (re)connects: mounts found on the node are adopted, not mounted again, and mounts of running
// pods are started. A running container holds its mounts at once, without waiting for the
// adoption check or a remount: it must never lose them to a grace period. Mounts nobody uses
// any more then begin their grace period.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.sweepCopies(ctrs)
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

// sweepCopies removes the subPath copies of containers removed while the plugin was away.
func (p *Plugin) sweepCopies(ctrs []*api.Container) {
	c := p.subPathCopies()
	if c == nil {
		return
	}
	keep := make(map[string]bool, len(ctrs))
	for _, ctr := range ctrs {
		keep[ctr.GetId()] = true
	}
	removed, err := c.Sweep(keep)
	if err != nil {
		p.log.Warnf("remove the subPath copies of removed containers: %v", err)
	}
	if len(removed) > 0 {
		p.log.Infof("removed the subPath copies of %d containers that no longer exist", len(removed))
	}
}
