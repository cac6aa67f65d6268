// Package nri runs mountkeeper as a containerd / CRI-O NRI plugin: at CreateContainer it finds
// the pod's runtime class, checks the class mounts against the container and the host, and
// answers with a container adjustment that adds them, or with an error that fails the container.
package nri

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/hostmount"
	"github.com/mountkeeper/mountkeeper/netmount"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// Plugin is the NRI plugin. Its methods are the NRI stub's event handlers.
type Plugin struct {
	host specmod.Host
	log  *logrus.Logger

	mu  sync.RWMutex
	cfg *configs.Config
	// pinned: the config was named on the command line, so one the runtime hands over in
	// Configure (plugin_config_path) is not used.
	pinned bool

	newMounter func(*configs.Config) (Mounter, error)
	net        Mounter // nil until a config has network mounts
}

// NewHostChecker is the host side the plugin checks through: the live host, with the checks
// run inline, because CreateContainer bounds its whole decision by createBudget already (one
// bounded goroutine per request instead of two).
func NewHostChecker() specmod.Host {
	return hostmount.NewChecker(hostmount.Live{}).WithTimeout(0)
}

// NewPlugin returns a plugin serving cfg. pinned says cfg was chosen explicitly by the
// operator and must win over a config the runtime passes at registration.
func NewPlugin(cfg *configs.Config, pinned bool, host specmod.Host, log *logrus.Logger) *Plugin {
	return &Plugin{cfg: cfg, pinned: pinned, host: host, log: log}
}

// Configure takes the config the runtime passes to a pre-registered plugin (the file in the
// runtime's plugin_config_path), unless the operator pinned one, and subscribes to the events
// the plugin handles.
func (p *Plugin) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	p.log.Infof("connected to %s %s", runtime, version)
	if strings.TrimSpace(config) != "" {
		if p.pinned {
			p.log.Warn("the runtime passed a plugin config, but --config was given: using --config")
		} else {
			cfg, err := configs.Parse([]byte(config))
			if err != nil {
				return 0, fmt.Errorf("config passed by %s: %w", runtime, err)
			}
			p.setConfig(cfg)
			p.log.Info("using the config passed by the runtime")
		}
	}
	if err := p.startMounter(); err != nil {
		return 0, err
	}
	return api.MustParseEventMask("RunPodSandbox,CreateContainer,RemoveContainer"), nil
}

func (p *Plugin) config() *configs.Config {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.cfg
}

func (p *Plugin) setConfig(cfg *configs.Config) {
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
}

// CreateContainer repairs the container's stale subPath mounts, then adds the class mounts of
// the pod's runtime class. A pod of no configured class gets no class mounts; a class mount
// that cannot be made exactly as asked fails the container, since a container whose volume is
// silently missing writes its data into its rootfs and loses it.
//
// The whole decision is bounded by createBudget: a runtime that waits longer than its plugin
// timeout creates the container WITHOUT the plugin's mounts, so answering "no" in time is
// what keeps the volume from going silently missing. Each step has its own, shorter bound and
// a clearer message; this one catches their sum.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	log := p.log.WithFields(logrus.Fields{
		"pod": pod.GetNamespace() + "/" + pod.GetName(), "container": ctr.GetName(), "handler": pod.GetRuntimeHandler(),
	})
	who := pod.GetNamespace() + "/" + pod.GetName() + "/" + ctr.GetName()
	cfg := p.config()
	budget := cfg.CreateBudget.Or(configs.DefaultCreateBudget)
	type result struct {
		adj *api.ContainerAdjustment
		err error
	}
	done := make(chan result, 1)
	go func() {
		adj, err := p.adjust(log, cfg, budget, who, pod, ctr)
		done <- result{adj, err}
	}()
	timer := time.NewTimer(budget)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			log.Error(r.err)
		}
		return r.adj, nil, r.err
	case <-timer.C:
		// The container will not be created; whatever the late decision claimed is released.
		go func() { <-done; p.release(ctr.GetId()) }()
		err := fmt.Errorf("mountkeeper: container %s: no answer within createBudget %s (is a network filesystem under a source or subPath dead?): refused rather than created without its mounts", who, budget)
		log.Error(err)
		return nil, nil, err
	}
}

func (p *Plugin) adjust(log *logrus.Entry, cfg *configs.Config, budget time.Duration, who string, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	existing := ociMounts(ctr.GetMounts())
	if err := repairSubPaths(cfg, log, who, existing); err != nil {
		return nil, err
	}
	acquire, cancel := p.acquirer(ctr.GetId(), acquireBudget(budget))
	defer cancel()
	class, edits, ok, err := editsFor(cfg, p.host, acquire, pod.GetRuntimeHandler(), existing)
	if err != nil {
		p.release(ctr.GetId()) // the container will not exist: no RemoveContainer will come
	}
	switch {
	case !ok:
		log.Debugf("no runtime class %q in the config: container left unchanged", class)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("mountkeeper: runtime class %q, container %s: %w", class, who, err)
	}
	adjust := &api.ContainerAdjustment{}
	added := make([]string, len(edits.Mounts))
	for i, m := range edits.Mounts {
		adjust.AddMount(nriMount(m))
		added[i] = m.String()
	}
	log.WithField("class", class).Infof("adding %d class mounts: %s", len(added), strings.Join(added, ", "))
	return adjust, nil
}

// editsFor is the one decision shared by the plugin, `mountkeeper render` and the hook: the
// class of a runtime handler, and its edits checked against the container's mounts and the
// host. ok is false when the config has no class for the handler.
// hostPath gives the host path of each network filesystem mount.
func editsFor(cfg *configs.Config, host specmod.Host, hostPath func(netmount.Spec) (string, error), handler string, existing []oci.Mount) (string, specmod.Edits, bool, error) {
	class, rc, ok := cfg.Class(handler)
	if !ok {
		return class, specmod.Edits{}, false, nil
	}
	edits, err := rc.Edits(hostPath)
	if err != nil {
		return class, edits, true, err
	}
	if err := edits.Verify(existing, host); err != nil {
		return class, edits, true, errors.New(oneLine(err))
	}
	return class, edits, true, nil
}

func ociMounts(ms []*api.Mount) []oci.Mount {
	out := make([]oci.Mount, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.ToOCI(nil))
	}
	return out
}

func nriMount(m specmod.Mount) *api.Mount {
	o := m.OCI()
	return &api.Mount{Destination: o.Destination, Type: o.Type, Source: o.Source, Options: o.Options}
}

// oneLine joins a multi-error into one line: the runtime shows the message in a pod event,
// where line breaks are lost or cut.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
