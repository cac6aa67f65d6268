// Package nri runs mountkeeper as a containerd / CRI-O NRI plugin: a front end of the decision
// engine (internal/engine). At CreateContainer it hands the container to the engine and answers with
// a container adjustment that adds the class mounts, or with the engine's refusal, which fails
// the container. It also drives the network mounts' lifecycle (RunPodSandbox, RemoveContainer,
// Synchronize) and the connection to the runtime (run.go).
package nri

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/guard"
	"github.com/mountkeeper/mountkeeper/internal/hostmount"
	"github.com/mountkeeper/mountkeeper/internal/idmap"
	"github.com/mountkeeper/mountkeeper/internal/metrics"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/internal/subpath/liveupdate"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// Plugin is the NRI plugin. Its methods are the NRI stub's event handlers.
type Plugin struct {
	host specmod.Host
	log  *logrus.Logger

	mu  sync.RWMutex
	cfg *configs.Config
	// eng decides with cfg and the side effects below (net, copies, idmap); built again
	// whenever one of them changes (rebuildLocked), not per container. Guarded by mu.
	eng *engine.Engine
	// pinned: the config was named on the command line, so one the runtime hands over in
	// Configure (plugin_config_path) is not used.
	pinned bool

	newMounter func(*configs.Config) (Mounter, error)
	// mountsLeft says whether an earlier agent left network mounts or their state in cfg's
	// state directory: the Mounter is then made even for a config without network mounts, to
	// adopt them and release them once no container uses them.
	mountsLeft func(cfg *configs.Config) bool
	net        Mounter // nil until a config has network mounts

	subPaths *subpath.Repairer    // repairs stale subPath mounts, below cfg's kubelet root
	copies   *copies.Copies       // private copies of atomic-writer subPaths (made by subPaths); nil with subPathRepair off
	follower *liveupdate.Follower // makes live copies follow their volume (live.go); nil with copies
	live     *metrics.LiveSubPaths

	syncMu    sync.Mutex  // one Synchronize at a time
	reconcile *reconciler // what Synchronize leaves for after its answer (reconcile.go)
	// syncAnswered, set by tests, is called when Synchronize has done its part, before it
	// answers: a test makes the answer late, as on a node too busy to answer in time.
	syncAnswered func()

	metrics    *metrics.Metrics          // nil counts nothing
	fallbacks  *metrics.SubPathFallbacks // nil counts nothing
	configFrom string
	lastReload *ReloadResult // guarded by mu
	reloadMu   sync.Mutex    // one ReloadConfig at a time
	applyMu    sync.Mutex    // one apply at a time
	connected  atomic.Bool   // registered with the runtime (readiness)
	requests   inflight      // NRI requests under way (liveness, health.go)
	// everConnected: a registration came before, so the next one is a reconnection.
	everConnected atomic.Bool

	guardMu     sync.Mutex
	guard       *guard.Signer // signs with the node's guard key (guardFor)
	guardKeyDir string        // the state dir the key was read from

	// idmap asks the kernel whether a class mount can be idmapped, for containers with a user
	// namespace; nil: idmap.Default. Set by tests through withIdmap.
	idmap engine.Idmapper
}

// NewHostChecker is the host side the plugin checks through: the live host, each check bounded
// (hostmount.DefaultTimeout, below createBudget) and keyed by its sources. Bounding only the
// whole decision would leave one goroutine, and on a dead FUSE mount one OS thread, behind
// per CreateContainer; keyed checks leave at most one per dead source (package bounded).
//
// It remembers the sources that passed until the host changes (hostmount.Checker.WithCache);
// where inotify or /proc/self/mountinfo cannot be opened, it checks every time.
func NewHostChecker() specmod.Host {
	c := hostmount.NewChecker(hostmount.System{})
	if cached, err := c.WithCache(); err == nil {
		return cached
	}
	return c
}

func newHostChecker(in hostmount.Inspector) specmod.Host { return hostmount.NewChecker(in) }

// Option completes a plugin NewPlugin builds.
type Option func(*Plugin)

// NewPlugin returns a plugin serving cfg, complete with opts. pinned says cfg was chosen
// explicitly by the operator and must win over a config the runtime passes at registration.
func NewPlugin(cfg *configs.Config, pinned bool, host specmod.Host, log *logrus.Logger, opts ...Option) *Plugin {
	p := &Plugin{cfg: cfg, pinned: pinned, host: host, log: log, subPaths: subpath.NewRepairer(cfg.KubeletRoot)}
	for _, o := range opts {
		o(p)
	}
	p.reconcile = newReconciler(p.reconcileJob)
	p.rebuildLocked()
	return p
}

// Configure takes the config the runtime passes to a pre-registered plugin (the file in the
// runtime's plugin_config_path), unless the operator pinned one, and subscribes to the events
// the plugin handles.
func (p *Plugin) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	defer p.requests.end(reqConfigure, p.requests.begin(reqConfigure))
	p.log.Infof("connected to %s %s", runtime, version)
	p.connected.Store(true)
	p.metrics.Connected(true, p.everConnected.Swap(true))
	var cfg *configs.Config // nil: the config in force
	if strings.TrimSpace(config) != "" {
		if p.pinned {
			p.log.Warn("the runtime passed a plugin config, but --config was given: using --config")
		} else {
			var err error
			if cfg, err = configs.Parse([]byte(config)); err != nil {
				return 0, fmt.Errorf("config passed by %s: %w", runtime, err)
			}
		}
	}
	if err := p.apply(cfg); err != nil {
		return 0, err
	}
	if cfg != nil {
		p.log.Info("using the config passed by the runtime")
	}
	return events, nil
}

// events are the events the plugin handles.
var events = api.MustParseEventMask("RunPodSandbox,CreateContainer,PostStartContainer,StopContainer,RemoveContainer")

func (p *Plugin) config() *configs.Config {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.cfg
}

// apply puts cfg in force, or with nil the config in force again (Configure, at every NRI
// (re)connect). It makes the Mounter cfg needs first: a config whose mounter cannot start
// (no cgroup2, state dir not writable) is refused with the config in force untouched, and at
// Configure fails the plugin's registration loudly instead of each container later. Then cfg
// is put in force with the mounter and the subPath copies it needs (one engine rebuild), a
// mounter made for an earlier config takes cfg's settings (Reconfigurer), the eager classes'
// network filesystems are mounted (holdEager) and the guard key is loaded.
//
// One apply at a time (applyMu): Configure and a reload may come together, and two at once
// could each start a mounter for the same state dir.
func (p *Plugin) apply(cfg *configs.Config) error {
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	if cfg == nil {
		cfg = p.config()
	}
	held := p.mounter()
	net := held
	if net == nil && (cfg.HasNetworkMounts() || p.mountsLeft != nil && p.mountsLeft(cfg)) {
		m, err := p.makeMounter(cfg)
		if err != nil {
			return err
		}
		net = m
	}
	subPaths := subpath.NewRepairer(cfg.KubeletRoot)
	next := copiesFor(cfg, subPaths)
	p.mu.Lock()
	old := p.copies
	p.cfg, p.net, p.subPaths, p.copies = cfg, net, subPaths, next
	p.follower = p.followerForLocked(cfg, next)
	p.rebuildLocked()
	p.mu.Unlock()
	if r, ok := held.(Reconfigurer); ok {
		r.Reconfigure(cfg)
	}
	holdEager(net, cfg, held != nil)
	p.sweepOldCopies(old, next)
	p.startGuard(cfg)
	return nil
}

// copiesFor is where cfg keeps the private copies of subPaths, made on demand by r: below
// <stateDir>/subpath; nil with subPathRepair off.
func copiesFor(cfg *configs.Config, r *subpath.Repairer) *copies.Copies {
	if !cfg.SubPathRepair {
		return nil
	}
	b := cfg.SubPathCopies
	return copies.New(r, filepath.Join(cfg.StateDir, "subpath"), copies.Budget{
		PodBytes: b.PodBytes, PodEntries: b.PodEntries, NodeBytes: b.NodeBytes, NodeEntries: b.NodeEntries,
	})
}

// sweepOldCopies removes the copies below old once next is in force instead: a config that
// turns copies off or moves them elsewhere would leave the old copies (secrets among them)
// where nothing removes them any more. The containers keep what they bound. It runs without
// p.mu, which every CreateContainer takes.
func (p *Plugin) sweepOldCopies(old, next *copies.Copies) {
	if old == nil || next != nil && next.Dir == old.Dir {
		return
	}
	if _, err := old.Sweep(nil); err != nil {
		p.log.Warnf("remove the subPath copies below %s: %v", old.Dir, err)
	}
}

func (p *Plugin) subPathCopies() *copies.Copies {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.copies
}

// rebuildLocked builds the decision engine for the config in force with the plugin's side
// effects. Callers hold p.mu for writing.
func (p *Plugin) rebuildLocked() {
	e := &engine.Engine{Config: p.cfg, Host: p.host, SubPaths: p.subPaths, Idmap: p.idmap}
	if e.Idmap == nil {
		e.Idmap = idmap.Default
	}
	if p.net != nil {
		e.Network = mounterNetwork{p.net}
	}
	if p.copies != nil {
		e.SubPathCopies = p.copies
	}
	p.eng = e
}

// engine is the decision engine in force; its Config is the config in force.
func (p *Plugin) engine() *engine.Engine {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.eng
}

// CreateContainer repairs the container's stale subPath mounts, then adds the class mounts of
// the pod's runtime class (the engine decides). A pod of no configured class gets no class
// mounts; a class mount that cannot be made exactly as asked fails the container, since a
// container whose volume is silently missing writes its data into its rootfs and loses it.
//
// The whole decision is bounded by createBudget: a runtime that waits longer than its plugin
// timeout creates the container WITHOUT the plugin's mounts, so answering "no" in time is
// what keeps the volume from going silently missing. Each step has its own, shorter bound and
// a clearer message; this one catches their sum.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (adj *api.ContainerAdjustment, _ []*api.ContainerUpdate, err error) {
	defer p.requests.end(reqCreateContainer, p.requests.begin(reqCreateContainer))
	start := time.Now()
	e := p.engine()
	cfg := e.Config
	defer func() { p.record(cfg, pod.GetRuntimeHandler(), err, time.Since(start)) }()
	req := engine.Request{
		Handler: pod.GetRuntimeHandler(),
		Container: engine.Container{
			Namespace: pod.GetNamespace(), Pod: pod.GetName(), Name: ctr.GetName(), ID: ctr.GetId(),
		},
		Mounts:         ociMounts(ctr.GetMounts()),
		PodAnnotations: pod.GetAnnotations(),
	}
	userns := hasUserNamespace(ctr)
	req.Privileged = engine.PrivilegedMounts(req.Mounts, userns)
	req.UserNamespace = userns
	// Every line about the container carries it (namespace/pod/name); the refusal and the
	// info line name its runtime class.
	log := p.log.WithField("container", req.Container.String())
	var r outcome
	if !e.MayBlock(req) {
		// Nothing in this decision can wait on the host: no goroutine, no timer; no network
		// mount, so nothing waits on ctx.
		r = p.decide(context.Background(), e, req)
	} else {
		r = p.decideAside(e, req)
	}
	r.d.LogRepairs(log)
	p.metrics.SubPath(len(r.d.Copies), len(r.d.Repairs))
	for _, f := range r.d.Fallbacks {
		p.fallbacks.Count(f.Reason)
	}
	if r.err != nil {
		var pe *bounded.PanicError
		if errors.As(r.err, &pe) {
			log.WithField("stack", string(pe.Stack)).Errorf("%s: panic: %v", pe.What, pe.Value)
			var refusal *engine.Error
			if !errors.As(r.err, &refusal) {
				r.err = engine.Refuse(req.Handler, req.Container, engine.WithReason(engine.ReasonPanic, fmt.Errorf("%w: refused rather than created without its mounts", r.err)))
			}
		}
		log.Error(r.err)
		return nil, nil, r.err
	}
	p.trackLive(log, ctr.GetId(), &r.d)
	adj = adjustment(log, r.d, ctr.GetMounts(), userns)
	if r.d.Configured {
		p.markHandled(log, adj, cfg, ctr.GetId())
	}
	return adj, nil, nil
}

// decideAside runs a decision that may wait on the host on a goroutine of its own, for at most
// createBudget; past it the container is refused, and whatever the late decision claims is
// released (the container will not be created). Its own function: the goroutine's closure
// would otherwise move every request to the heap, those decided inline too.
func (p *Plugin) decideAside(e *engine.Engine, req engine.Request) outcome {
	budget := e.Config.CreateBudget
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), acquireBudget(budget))
		defer cancel()
		done <- p.decide(ctx, e, req)
	}()
	timer := time.NewTimer(budget)
	defer timer.Stop()
	select {
	case r := <-done:
		return r
	case <-timer.C:
		go func() { <-done; p.release(req.Container.ID) }()
		return outcome{err: engine.Refuse(req.Handler, req.Container, engine.WithReason(engine.ReasonBudget, fmt.Errorf("no answer within createBudget %s (is a network filesystem under a source or subPath dead?): refused rather than created without its mounts", budget)))}
	}
}

// outcome is what a decision came to: the engine's decision, or the refusal.
type outcome struct {
	d   engine.Decision
	err error
}

// decide runs engine e, ctx bounding its wait for network mounts (acquireBudget); a panic
// refuses the container instead of ending the plugin (a runtime without its plugin creates
// containers without their mounts).
func (p *Plugin) decide(ctx context.Context, e *engine.Engine, req engine.Request) (r outcome) {
	defer func() {
		if v := recover(); v != nil {
			p.release(req.Container.ID)
			r = outcome{err: &bounded.PanicError{What: "internal error", Value: v, Stack: debug.Stack()}}
		}
	}()
	d, err := e.Decide(ctx, req)
	return outcome{d, err}
}

// adjustment translates a decision into the runtime's terms: each subPath mount with a private
// copy is replaced by the same mount from the copy (with engine.CopyMountOptions), then the
// class mounts are added.
func adjustment(log *logrus.Entry, d engine.Decision, mounts []*api.Mount, userns bool) *api.ContainerAdjustment {
	if !d.Configured && len(d.Copies) == 0 {
		log.Debugf("no runtime class %q in the config: container left unchanged", d.Class)
		return nil
	}
	adjust := &api.ContainerAdjustment{}
	for _, c := range d.Copies {
		for _, m := range mounts {
			if m.Source == c.Target.Path {
				adjust.RemoveMount(m.Destination)
				adjust.AddMount(&api.Mount{Destination: m.Destination, Type: m.Type, Source: c.Path, Options: engine.CopyMountOptions(m.Options, c, userns)})
			}
		}
	}
	if !d.Configured {
		return adjust
	}
	adjust.Mounts = slices.Grow(adjust.Mounts, len(d.Mounts))
	for _, m := range d.Mounts {
		adjust.AddMount(nriMount(m))
	}
	if log.Logger.IsLevelEnabled(logrus.InfoLevel) {
		log.Info(addedMessage(d))
	}
	return adjust
}

// addedMessage is the info line of a container given class mounts: how many, of which class,
// each as specmod.Mount.String. It names no network filesystem's spec (netspec keeps its
// credentials out of logs): a network mount appears by its host path.
func addedMessage(d engine.Decision) string {
	var b strings.Builder
	n := 64 + len(d.Class)
	for _, m := range d.Mounts {
		n += len(m.Source) + len(m.Destination) + 32
	}
	b.Grow(n)
	b.WriteString("adding ")
	b.WriteString(strconv.Itoa(len(d.Mounts)))
	b.WriteString(" class mounts of runtime class ")
	b.WriteString(d.Class)
	b.WriteString(": ")
	for i, m := range d.Mounts {
		if i > 0 {
			b.WriteString(", ")
		}
		m.Describe(&b)
	}
	return b.String()
}

func hasUserNamespace(ctr *api.Container) bool {
	for _, ns := range ctr.GetLinux().GetNamespaces() {
		if ns.GetType() == "user" {
			return true
		}
	}
	return false
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

// record counts one CreateContainer answer, decided with cfg. The class label is a class of cfg
// or "none", never a handler a pod made up.
func (p *Plugin) record(cfg *configs.Config, handler string, err error, took time.Duration) {
	if p.metrics == nil {
		return
	}
	class, _, ok := cfg.Class(handler)
	if !ok {
		class = "none"
	}
	var refusal *engine.Error
	switch {
	case errors.As(err, &refusal):
		p.metrics.Decision(class, metrics.Refused, refusal.Reason, took)
	case err != nil:
		p.metrics.Decision(class, metrics.Refused, metrics.ReasonOther, took)
	case ok:
		p.metrics.Decision(class, metrics.Added, "", took)
	default:
		p.metrics.Decision(class, metrics.NoClass, "", took)
	}
}

// WithMetrics makes the plugin count what it does in m.
func WithMetrics(m *metrics.Metrics) Option {
	return func(p *Plugin) {
		p.metrics = m
		p.fallbacks = metrics.NewSubPathFallbacks(subpath.Reasons)
		m.Register(p.fallbacks.Collector())
		p.withLiveMetrics(m)
	}
}

// Ready says whether the plugin is registered with the runtime and serving (readiness).
func (p *Plugin) Ready() error {
	if !p.connected.Load() {
		return errors.New("not connected to the runtime's NRI socket")
	}
	return nil
}

// Reload puts cfg in force for the next CreateContainer. Network mounts that cfg no longer
// asks for and that no container uses begin their grace period; mounts in use, and those whose
// spec did not change, are untouched.
//
// A config that changes a setting a running agent cannot (configs.Config.CheckLiveChange:
// stateDir) is refused whole: the config in force stays.
func (p *Plugin) Reload(cfg *configs.Config) error {
	if err := p.config().CheckLiveChange(cfg); err != nil {
		return err
	}
	if err := p.apply(cfg); err != nil {
		return err // refused: the config in force stays, as the log says
	}
	if net := p.mounter(); net != nil {
		net.ReleaseUnused()
	}
	return nil
}
