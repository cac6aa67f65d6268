// Package configs holds mountkeeper's configuration: its types, strict loading, validation and
// the embedded default. A config maps CRI runtime handlers (runtime classes) to the mounts their
// containers get.
package configs

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// DefaultPath is where the agent looks for its config when none is named.
const DefaultPath = "/etc/mountkeeper/config.yaml"

// DefaultClass is the class of pods whose runtime handler is empty: the runtime's default
// handler. NRI reports those pods with handler "", not "runc".
const DefaultClass = "default"

// DefaultKubeletRoot is kubelet's --root-dir default.
const DefaultKubeletRoot = "/var/lib/kubelet"

// Config is the configuration in force: every default resolved when it was loaded, every class
// mount validated and translated once, so callers read plain values.
type Config struct {
	// KubeletRoot is kubelet's --root-dir, where subPath bind targets live.
	KubeletRoot string
	// SubPathRepair repairs stale subPath mounts of any container at CreateContainer.
	SubPathRepair bool
	// SubPathCopies bounds the private copies that replace atomic-writer subPath binds.
	SubPathCopies SubPathCopies
	// StateDir holds the host mounts of network filesystems and their state.
	StateDir string
	// MountTimeout bounds one mount attempt of a network filesystem.
	MountTimeout time.Duration
	// UnmountGrace is how long a network mount stays after its last container is removed, so
	// a restarting pod does not remount.
	UnmountGrace time.Duration
	// ProbeInterval is how often each held network mount is probed (a bounded stat and, for
	// FUSE, a look at its daemon's scope); a dead one is replaced under running containers.
	ProbeInterval time.Duration
	// CreateBudget is how long CreateContainer waits for a network mount that is not ready.
	// It stays below the runtime's plugin_request_timeout (2s by default): a plugin that
	// answers late is dropped and the container created WITHOUT its mounts.
	CreateBudget time.Duration
	// PluginRequestTimeout is the runtime's plugin_request_timeout, which CreateBudget stays
	// below by BudgetMargin.
	PluginRequestTimeout time.Duration
	RuntimeClasses       map[string]RuntimeClass
	// Warnings are what the config allows but is probably wrong, one line each, naming the
	// class and the mount (`validate` prints them).
	Warnings []string
}

// file is the configuration as the YAML file spells it; unset keys are zero.
type file struct {
	KubeletRoot   string `yaml:"kubeletRoot"`
	SubPathRepair *bool  `yaml:"subPathRepair"`
	// SubPathCopies holds the budgets of the subPath copies.
	SubPathCopies subPathCopiesFile `yaml:"subPathCopies"`
	StateDir      string            `yaml:"stateDir"`
	MountTimeout  Duration          `yaml:"mountTimeout"`
	UnmountGrace  Duration          `yaml:"unmountGrace"`
	ProbeInterval Duration          `yaml:"probeInterval"`
	CreateBudget  Duration          `yaml:"createBudget"`
	// PluginRequestTimeout says the runtime's plugin_request_timeout, when not its default.
	PluginRequestTimeout Duration                `yaml:"pluginRequestTimeout"`
	RuntimeClasses       map[string]RuntimeClass `yaml:"runtimeClasses"`
}

// Defaults of the keys a config may leave out.
const (
	DefaultStateDir     = "/var/lib/mountkeeper"
	DefaultMountTimeout = 30 * time.Second
	DefaultUnmountGrace = 30 * time.Second
	// DefaultProbeInterval is how often a held network mount is probed.
	DefaultProbeInterval = 3 * time.Second
	// MinProbeInterval keeps probing from becoming load on the servers.
	MinProbeInterval    = 100 * time.Millisecond
	DefaultCreateBudget = 1500 * time.Millisecond
	// DefaultPluginRequestTimeout is containerd's (and CRI-O's) default plugin_request_timeout.
	DefaultPluginRequestTimeout = 2 * time.Second
	// BudgetMargin is how far createBudget stays below the plugin request timeout. When the
	// budget runs out the plugin still has to build its refusal and send it back over ttrpc,
	// and the runtime's clock started before the request was marshalled and the plugin's
	// goroutine was scheduled: on a loaded node that takes tens to hundreds of milliseconds.
	// An answer that arrives after the timeout is dropped and the container created WITHOUT
	// its mounts, so the margin is generous.
	BudgetMargin = 500 * time.Millisecond
)

// resolve returns the config in force for a validated file: defaults filled in, each class
// mount translated into what it mounts.
func (f *file) resolve() *Config {
	c := &Config{
		KubeletRoot:   cmp.Or(f.KubeletRoot, DefaultKubeletRoot),
		SubPathRepair: f.SubPathRepair == nil || *f.SubPathRepair,
		SubPathCopies: f.SubPathCopies.resolve(cmp.Or(time.Duration(f.CreateBudget), DefaultCreateBudget)),
		StateDir:      cmp.Or(f.StateDir, DefaultStateDir),
		MountTimeout:  cmp.Or(time.Duration(f.MountTimeout), DefaultMountTimeout),
		UnmountGrace:  cmp.Or(time.Duration(f.UnmountGrace), DefaultUnmountGrace),
		ProbeInterval: cmp.Or(time.Duration(f.ProbeInterval), DefaultProbeInterval),
		CreateBudget:  cmp.Or(time.Duration(f.CreateBudget), DefaultCreateBudget),

		PluginRequestTimeout: cmp.Or(time.Duration(f.PluginRequestTimeout), DefaultPluginRequestTimeout),
		RuntimeClasses:       make(map[string]RuntimeClass, len(f.RuntimeClasses)),
	}
	for name, rc := range f.RuntimeClasses {
		mounts := make([]Mount, len(rc.Mounts))
		for i, m := range rc.Mounts {
			mounts[i] = m.resolve()
		}
		c.RuntimeClasses[name] = RuntimeClass{Mounts: mounts, AllowBidirectionalForUnprivileged: rc.AllowBidirectionalForUnprivileged, NetworkMount: rc.NetworkMount,
			SubPathUpdates: cmp.Or(rc.SubPathUpdates, SubPathUpdatesKubelet)}
	}
	for _, name := range sortedKeys(c.RuntimeClasses) {
		for i, m := range c.RuntimeClasses[name].Mounts {
			if m.Network == nil {
				continue
			}
			for _, w := range m.Network.Warnings() {
				c.Warnings = append(c.Warnings, fmt.Sprintf("runtime class %q, mount %d (destination %q): %s", name, i+1, m.Destination, w))
			}
		}
	}
	return c
}

// HasNetworkMounts says whether any class mounts a network filesystem.
func (c *Config) HasNetworkMounts() bool {
	for _, rc := range c.RuntimeClasses {
		if len(rc.NetworkSpecs()) > 0 {
			return true
		}
	}
	return false
}

// RuntimeClass is what the containers of one CRI runtime handler get.
type RuntimeClass struct {
	// AllowBidirectionalForUnprivileged gives the class's rshared (Bidirectional) mounts to
	// every container of the class. Without it only privileged containers get them, as in
	// Kubernetes: a mount an unprivileged container makes there (as root of its own user
	// namespace, say) would appear on the host.
	AllowBidirectionalForUnprivileged bool `yaml:"allowBidirectionalForUnprivileged"`
	// NetworkMount says when the class's network filesystems are mounted: MountOnDemand (the
	// default: when a pod of the class starts) or MountEager (when the plugin starts, and
	// kept while the config says so), so that even a class's first container finds them.
	NetworkMount string `yaml:"networkMount"`
	// SubPathUpdates says whether the configMap, secret, downwardAPI and projected subPath
	// mounts of the class's pods follow updates of their volume: SubPathUpdatesKubelet (the
	// default: content fixed when the container starts, kubelet's semantics), SubPathUpdatesLive
	// (all of them) or SubPathUpdatesPodOptIn (those of pods annotated LiveSubPathsAnnotation:
	// "true"). Resolved at load: never "" in a loaded config.
	SubPathUpdates string `yaml:"subPathUpdates"`

	Mounts []Mount `yaml:"mounts"`
}

// Values of RuntimeClass.SubPathUpdates.
const (
	SubPathUpdatesKubelet  = "kubelet"
	SubPathUpdatesLive     = "live"
	SubPathUpdatesPodOptIn = "podOptIn"
)

// LiveSubPathsAnnotation is the pod annotation by which a pod of a SubPathUpdatesPodOptIn class
// opts its own subPath mounts in to live updates, with the value "true".
const LiveSubPathsAnnotation = "mountkeeper.io/live-subpaths"

// LiveSubPaths says whether the class's live updates are on for all its pods (live), for
// those that opt in (podOptIn) or for none.
func (rc RuntimeClass) LiveSubPaths() bool {
	return rc.SubPathUpdates == SubPathUpdatesLive || rc.SubPathUpdates == SubPathUpdatesPodOptIn
}

// CanMountBeneath says whether the kernel has what live subPath updates need
// (MOVE_MOUNT_BENEATH, Linux >= 6.5): nil if it has, else why not. A variable for tests.
var CanMountBeneath = mounttable.CanMountBeneath

// Values of RuntimeClass.NetworkMount.
const (
	MountOnDemand = "onDemand"
	MountEager    = "eager"
)

// Eager says the class's network filesystems are mounted ahead of its pods.
func (rc RuntimeClass) Eager() bool { return rc.NetworkMount == MountEager }

// Mount is one class mount: the keys as the config file spells them, and, once loaded, what it
// mounts.
type Mount struct {
	Source      string   `yaml:"source"`
	Destination string   `yaml:"destination"`
	Propagation string   `yaml:"propagation"` // rprivate|rslave|rshared or None|HostToContainer|Bidirectional; default rprivate
	ReadOnly    bool     `yaml:"readOnly"`
	Type        string   `yaml:"type"` // bind (default)
	Options     []string `yaml:"options"`
	// AllowWithoutIdmap passes the mount un-idmapped into a container with a user namespace
	// when its filesystem cannot be idmapped (FUSE, NFS, CIFS): the container then sees every
	// file owned by 65534 (nobody) and the kernel checks access by the host uids. Without it
	// such a container is refused.
	AllowWithoutIdmap bool `yaml:"allowWithoutIdmap"`
	// FUSEDefaultOptions, for a fuse.<program> mount, adds allow_other and default_permissions
	// where its options lack them (netspec.WithFUSEDefaults); default true.
	FUSEDefaultOptions *bool `yaml:"fuseDefaultOptions"`

	// Bind is the bind mount into the container, valid (specmod.Mount.Validate: checked at
	// load, not again per container). For a network filesystem its source is empty until the
	// filesystem's host path is known, and it has no options.
	Bind specmod.Mount `yaml:"-"`
	// Network is the network filesystem the mount needs on the host; nil for a bind.
	Network *netspec.Spec `yaml:"-"`
}

// resolve fills in Bind and Network of a validated mount.
func (m Mount) resolve() Mount {
	m.Bind, _ = m.specMount()
	if ns, ok := m.networkSpec(); ok {
		m.Network = &ns
		m.Bind.Source, m.Bind.Options = "", nil
	}
	return m
}

// ClassName maps a CRI runtime handler to its class name.
func ClassName(handler string) string {
	if handler == "" {
		return DefaultClass
	}
	return handler
}

// Class returns the class for a CRI runtime handler and whether the config has one.
func (c *Config) Class(handler string) (string, RuntimeClass, bool) {
	name := ClassName(handler)
	rc, ok := c.RuntimeClasses[name]
	return name, rc, ok
}

// NetworkSpecs returns the class's network filesystems.
func (rc RuntimeClass) NetworkSpecs() []netspec.Spec {
	var specs []netspec.Spec
	for _, m := range rc.Mounts {
		if m.Network != nil {
			specs = append(specs, *m.Network)
		}
	}
	return specs
}

// networkSpec returns the network filesystem a mount of a network type (nfs, cifs, fuse.sshfs,
// ...) asks for: its options are the filesystem's mount options, not bind options.
func (m Mount) networkSpec() (netspec.Spec, bool) {
	if !netspec.IsNetworkType(m.Type) {
		return netspec.Spec{}, false
	}
	opts := m.Options
	if m.FUSEDefaultOptions == nil || *m.FUSEDefaultOptions {
		opts = netspec.WithFUSEDefaults(m.Type, opts)
	}
	return netspec.Spec{Type: m.Type, Source: m.Source, Options: opts}, true
}

func (m Mount) specMount() (specmod.Mount, error) {
	prop := specmod.Private
	if m.Propagation != "" {
		p, err := specmod.ParsePropagation(m.Propagation)
		if err != nil {
			return specmod.Mount{}, err
		}
		prop = p
	}
	return specmod.Mount{
		Source:      m.Source,
		Destination: m.Destination,
		Propagation: prop,
		ReadOnly:    m.ReadOnly,
		Options:     m.Options,
	}, nil
}

// validate reports every problem in the config file, each naming the class and the mount.
func (c *file) validate() error {
	var errs []error
	if c.KubeletRoot != "" && !isAbsClean(c.KubeletRoot) {
		errs = append(errs, fmt.Errorf("kubeletRoot %q must be an absolute, clean path", c.KubeletRoot))
	}
	if c.StateDir != "" && !isAbsClean(c.StateDir) {
		errs = append(errs, fmt.Errorf("stateDir %q must be an absolute, clean path", c.StateDir))
	}
	for _, d := range []struct {
		key string
		v   Duration
	}{{"mountTimeout", c.MountTimeout}, {"unmountGrace", c.UnmountGrace}, {"probeInterval", c.ProbeInterval}, {"createBudget", c.CreateBudget}, {"pluginRequestTimeout", c.PluginRequestTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %s is negative", d.key, time.Duration(d.v)))
		}
	}
	if c.ProbeInterval > 0 && time.Duration(c.ProbeInterval) < MinProbeInterval {
		errs = append(errs, fmt.Errorf("probeInterval %s is below the minimum %s", time.Duration(c.ProbeInterval), MinProbeInterval))
	}
	errs = append(errs, c.validateBudget())
	if c.CreateBudget >= 0 {
		errs = append(errs, c.SubPathCopies.validate(cmp.Or(time.Duration(c.CreateBudget), DefaultCreateBudget)))
	}
	if len(c.RuntimeClasses) == 0 && c.SubPathRepair != nil && !*c.SubPathRepair {
		errs = append(errs, errors.New("runtimeClasses is empty and subPathRepair is false: mountkeeper would change no container"))
	}
	for _, name := range sortedKeys(c.RuntimeClasses) {
		errs = append(errs, validateClass(name, c.RuntimeClasses[name]))
	}
	errs = append(errs, c.validateSources())
	return errors.Join(errs...)
}

// validateSources refuses bind sources that overlap: a source that equals or lies under
// another source of any class, or lies under or holds stateDir or kubeletRoot. Sources are
// resolved without following symlinks (hostmount.OpenSource), but a container that can write
// an outer source could still replace an inner one with a symlink, or a directory of its
// choosing, and hand the next container of any class whatever it points at.
func (c *file) validateSources() error {
	type source struct {
		path, where, dst string
	}
	var srcs []source
	for _, name := range sortedKeys(c.RuntimeClasses) {
		for i, m := range c.RuntimeClasses[name].Mounts {
			if netspec.IsNetworkType(m.Type) || !isAbsClean(m.Source) {
				continue // network host paths lie under stateDir; invalid ones are reported already
			}
			srcs = append(srcs, source{m.Source, fmt.Sprintf("runtime class %q, mount %d", name, i+1), m.Destination})
		}
	}
	stateDir, kubeletRoot := cmp.Or(c.StateDir, DefaultStateDir), cmp.Or(c.KubeletRoot, DefaultKubeletRoot)
	var errs []error
	refuse := func(s source, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s (destination %q): %s", s.where, s.dst, fmt.Sprintf(format, args...)))
	}
	const symlinkRisk = "a container that can write there could replace it with a symlink to any host path, or a directory of its own: make the sources disjoint"
	for j, s := range srcs {
		for _, o := range srcs[:j] {
			switch {
			case s.path == o.path:
				refuse(s, "source %s is also the source of %s: %s", s.path, o.where, "give each class mount a source of its own, so that no class can change another's")
			case under(s.path, o.path):
				refuse(s, "source %s lies under %s, the source of %s: %s", s.path, o.path, o.where, symlinkRisk)
			case under(o.path, s.path):
				refuse(o, "source %s lies under %s, the source of %s: %s", o.path, s.path, s.where, symlinkRisk)
			}
		}
		switch {
		case s.path == stateDir || under(s.path, stateDir):
			refuse(s, "source %s lies under stateDir %s: mountkeeper keeps its network mounts, subPath copies and state there; choose a source outside it", s.path, stateDir)
		case under(stateDir, s.path):
			refuse(s, "source %s holds stateDir %s: the class's containers would see, and with write access could tamper with, mountkeeper's network mounts and state; choose a narrower source or move stateDir", s.path, stateDir)
		}
		switch {
		case s.path == kubeletRoot || under(s.path, kubeletRoot):
			refuse(s, "source %s lies under kubeletRoot %s: kubelet keeps every pod's volumes there (secrets, service account tokens, emptyDirs whose contents, symlinks included, containers write), so the class would hand other pods' data to its containers; use a volume in the pod spec instead", s.path, kubeletRoot)
		case under(kubeletRoot, s.path):
			refuse(s, "source %s holds kubeletRoot %s: the class's containers would see every pod's volumes (secrets, service account tokens); choose a narrower source", s.path, kubeletRoot)
		}
	}
	return errors.Join(errs...)
}

// under says whether p lies strictly below dir (both absolute and clean).
func under(p, dir string) bool {
	return dir == "/" && p != "/" || strings.HasPrefix(p, dir+"/")
}

// validateBudget keeps createBudget BudgetMargin below the runtime's plugin_request_timeout:
// a plugin that answers after it is dropped, and the runtime creates the container without
// the plugin's mounts.
func (c *file) validateBudget() error {
	timeout, from := DefaultPluginRequestTimeout, "its default; set pluginRequestTimeout if the runtime's is larger"
	if c.PluginRequestTimeout > 0 {
		timeout, from = time.Duration(c.PluginRequestTimeout), "pluginRequestTimeout"
	}
	if timeout <= BudgetMargin {
		return fmt.Errorf("pluginRequestTimeout %s leaves no createBudget: mountkeeper answers at least %s before the runtime's plugin_request_timeout; raise plugin_request_timeout in the runtime and here", timeout, BudgetMargin)
	}
	budget := cmp.Or(time.Duration(c.CreateBudget), DefaultCreateBudget)
	if c.CreateBudget < 0 || budget <= timeout-BudgetMargin {
		return nil
	}
	return fmt.Errorf("createBudget %s must stay at least %s below the runtime's plugin_request_timeout (%s, %s), or the runtime gives up first and creates the container without its mounts: set createBudget to at most %s",
		budget, BudgetMargin, timeout, from, timeout-BudgetMargin)
}

// ClassNames returns the configured class names, sorted.
func (c *Config) ClassNames() []string { return sortedKeys(c.RuntimeClasses) }

func sortedKeys(classes map[string]RuntimeClass) []string {
	names := make([]string, 0, len(classes))
	for n := range classes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func validateClass(name string, rc RuntimeClass) error {
	if name == "" {
		return fmt.Errorf("runtime class \"\": name the CRI runtime handler, or %q for pods on the runtime's default handler", DefaultClass)
	}
	var errs []error
	switch rc.SubPathUpdates {
	case "", SubPathUpdatesKubelet:
		if len(rc.Mounts) == 0 {
			return fmt.Errorf("runtime class %q has no mounts", name)
		}
	case SubPathUpdatesLive, SubPathUpdatesPodOptIn:
		if err := CanMountBeneath(); err != nil {
			errs = append(errs, fmt.Errorf("runtime class %q: subPathUpdates: %s needs to mount beneath a mount (MOVE_MOUNT_BENEATH, Linux 6.5 or newer), and this kernel cannot: %v; use %s (kubelet's semantics) on this node", name, rc.SubPathUpdates, err, SubPathUpdatesKubelet))
		}
	default:
		errs = append(errs, fmt.Errorf("runtime class %q: subPathUpdates %q: use %s (the default: a subPath keeps the content it had when the container started), %s (every configMap, secret, downwardAPI and projected subPath of the class's pods follows updates) or %s (those of pods annotated %s: \"true\")", name, rc.SubPathUpdates, SubPathUpdatesKubelet, SubPathUpdatesLive, SubPathUpdatesPodOptIn, LiveSubPathsAnnotation))
	}
	switch rc.NetworkMount {
	case "", MountOnDemand:
	case MountEager:
		if !slices.ContainsFunc(rc.Mounts, func(m Mount) bool { return netspec.IsNetworkType(m.Type) }) {
			errs = append(errs, fmt.Errorf("runtime class %q: networkMount: %s is for classes with network filesystem mounts (nfs, cifs, fuse.<program>, ...); this one has none", name, MountEager))
		}
	default:
		errs = append(errs, fmt.Errorf("runtime class %q: networkMount %q: use %s (the default: mounted when a pod of the class starts) or %s (mounted when mountkeeper starts)", name, rc.NetworkMount, MountOnDemand, MountEager))
	}
	seen := map[string]int{}
	for i, m := range rc.Mounts {
		where := fmt.Sprintf("runtime class %q, mount %d (destination %q)", name, i+1, m.Destination)
		if merrs := validateMount(m); len(merrs) > 0 {
			for _, err := range merrs {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
			continue
		}
		if j, dup := seen[m.Destination]; dup {
			errs = append(errs, fmt.Errorf("%s: destination already used by mount %d", where, j))
		}
		seen[m.Destination] = i + 1
	}
	return errors.Join(errs...)
}

// validateMount returns every problem of one mount, so that the caller can name the class and
// the mount in each.
func validateMount(m Mount) []error {
	if ns, ok := m.networkSpec(); ok {
		return validateNetworkMount(m, ns)
	}
	var errs []error
	if m.FUSEDefaultOptions != nil {
		errs = append(errs, errors.New("fuseDefaultOptions is for fuse.<program> mounts only"))
	}
	if m.Type != "" && m.Type != "bind" {
		errs = append(errs, fmt.Errorf("type %q is not supported: use bind (the default), nfs, nfs4, cifs, glusterfs, ceph or fuse.<program>", m.Type))
	}
	sm, err := m.specMount()
	if err != nil {
		// Validate the mount as written: specmod reports the unknown propagation itself,
		// together with the mount's other problems instead of hiding them.
		sm = specmod.Mount{Source: m.Source, Destination: m.Destination,
			Propagation: specmod.Propagation(m.Propagation), ReadOnly: m.ReadOnly, Options: m.Options}
	}
	if err := sm.Validate(); err != nil {
		errs = append(errs, flatten(err)...)
	}
	return errs
}

// flatten lists the errors joined (errors.Join) in err, at any depth.
func flatten(err error) []error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var errs []error
	for _, e := range joined.Unwrap() {
		errs = append(errs, flatten(e)...)
	}
	return errs
}

func isAbsClean(p string) bool { return path.IsAbs(p) && path.Clean(p) == p }

// validateNetworkMount checks a network filesystem mount: its filesystem (type, source shape,
// options) and the bind into the container (destination, propagation).
func validateNetworkMount(m Mount, ns netspec.Spec) []error {
	var errs []error
	if m.FUSEDefaultOptions != nil && !strings.HasPrefix(m.Type, "fuse.") {
		errs = append(errs, fmt.Errorf("fuseDefaultOptions is for fuse.<program> mounts only, not %s", m.Type))
	}
	if err := ns.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := specmod.ValidateDestination(m.Destination); err != nil {
		errs = append(errs, err)
	}
	if m.Propagation != "" {
		if _, err := specmod.ParsePropagation(m.Propagation); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
