// Package configs holds mountkeeper's configuration: its types, strict loading, validation and
// the embedded default. A config maps CRI runtime handlers (runtime classes) to the mounts their
// containers get.
package configs

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"time"

	"github.com/mountkeeper/mountkeeper/netmount"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// DefaultPath is where the agent looks for its config when none is named.
const DefaultPath = "/etc/mountkeeper/config.yaml"

// DefaultClass is the class of pods whose runtime handler is empty: the runtime's default
// handler. NRI reports those pods with handler "", not "runc".
const DefaultClass = "default"

// DefaultKubeletRoot is kubelet's --root-dir default.
const DefaultKubeletRoot = "/var/lib/kubelet"

// Config is the whole configuration file: node-wide keys next to the runtime classes.
type Config struct {
	// KubeletRoot is kubelet's --root-dir, where subPath bind targets live.
	KubeletRoot string `yaml:"kubeletRoot"`
	// SubPathRepair re-resolves stale subPath mounts of any container at CreateContainer
	// (default true).
	SubPathRepair *bool `yaml:"subPathRepair"`
	// StateDir holds the host mounts of network filesystems and their state.
	StateDir string `yaml:"stateDir"`
	// MountTimeout bounds one mount attempt of a network filesystem (default 30s).
	MountTimeout Duration `yaml:"mountTimeout"`
	// UnmountGrace is how long a network mount stays after its last container is removed
	// (default 30s), so a restarting pod does not remount.
	UnmountGrace Duration `yaml:"unmountGrace"`
	// CreateBudget is how long CreateContainer waits for a network mount that is not ready
	// (default 1.5s). It must stay below the runtime's plugin_request_timeout (2s by default):
	// a plugin that answers late is dropped and the container created WITHOUT its mounts.
	CreateBudget   Duration                `yaml:"createBudget"`
	RuntimeClasses map[string]RuntimeClass `yaml:"runtimeClasses"`
}

// Defaults of the network-filesystem keys.
const (
	DefaultMountTimeout = 30 * time.Second
	DefaultUnmountGrace = 30 * time.Second
	DefaultCreateBudget = 1500 * time.Millisecond
)

// StateDirPath returns stateDir or its default.
func (c *Config) StateDirPath() string {
	if c.StateDir == "" {
		return netmount.DefaultStateDir
	}
	return c.StateDir
}

// HasNetworkMounts says whether any class mounts a network filesystem.
func (c *Config) HasNetworkMounts() bool {
	for _, rc := range c.RuntimeClasses {
		for _, m := range rc.Mounts {
			if _, ok := m.NetworkSpec(); ok {
				return true
			}
		}
	}
	return false
}

// KubeletRootDir returns kubeletRoot or its default.
func (c *Config) KubeletRootDir() string {
	if c.KubeletRoot == "" {
		return DefaultKubeletRoot
	}
	return c.KubeletRoot
}

// RepairSubPaths says whether stale subPath mounts are repaired.
func (c *Config) RepairSubPaths() bool {
	return c.SubPathRepair == nil || *c.SubPathRepair
}

// RuntimeClass is what the containers of one CRI runtime handler get.
type RuntimeClass struct {
	Mounts []Mount `yaml:"mounts"`
}

// Mount is one class mount as the config file spells it.
type Mount struct {
	Source      string   `yaml:"source"`
	Destination string   `yaml:"destination"`
	Propagation string   `yaml:"propagation"` // rprivate|rslave|rshared or None|HostToContainer|Bidirectional; default rprivate
	ReadOnly    bool     `yaml:"readOnly"`
	Type        string   `yaml:"type"` // bind (default)
	Options     []string `yaml:"options"`
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

// Edits returns the spec edits for a class. The config must have been validated. hostPath
// gives the host path of each network filesystem mount: the NRI plugin mounts it (or waits
// for it) there, a dry run only computes it. A class without network mounts may pass nil.
func (rc RuntimeClass) Edits(hostPath func(netmount.Spec) (string, error)) (specmod.Edits, error) {
	var e specmod.Edits
	for _, m := range rc.Mounts {
		sm, _ := m.specMount()
		if ns, ok := m.NetworkSpec(); ok {
			if hostPath == nil {
				return e, fmt.Errorf("mount %s -> %s: network filesystems are not supported here", ns, m.Destination)
			}
			src, err := hostPath(ns)
			if err != nil {
				return e, fmt.Errorf("mount %s -> %s: %w", ns, m.Destination, err)
			}
			sm.Source, sm.Options = src, nil
		}
		e.Mounts = append(e.Mounts, sm)
	}
	return e, nil
}

// NetworkSpecs returns the class's network filesystems.
func (rc RuntimeClass) NetworkSpecs() []netmount.Spec {
	var specs []netmount.Spec
	for _, m := range rc.Mounts {
		if ns, ok := m.NetworkSpec(); ok {
			specs = append(specs, ns)
		}
	}
	return specs
}

// NetworkSpec returns the network filesystem a mount of a network type (nfs, cifs, fuse.sshfs,
// ...) asks for: its options are the filesystem's mount options, not bind options.
func (m Mount) NetworkSpec() (netmount.Spec, bool) {
	if !netmount.IsNetworkType(m.Type) {
		return netmount.Spec{}, false
	}
	return netmount.Spec{Type: m.Type, Source: m.Source, Options: m.Options}, true
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

// Validate reports every problem in the config, each naming the class and the mount.
func (c *Config) Validate() error {
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
	}{{"mountTimeout", c.MountTimeout}, {"unmountGrace", c.UnmountGrace}, {"createBudget", c.CreateBudget}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %s is negative", d.key, time.Duration(d.v)))
		}
	}
	if len(c.RuntimeClasses) == 0 && !c.RepairSubPaths() {
		errs = append(errs, errors.New("runtimeClasses is empty and subPathRepair is false: mountkeeper would change no container"))
	}
	for _, name := range c.ClassNames() {
		errs = append(errs, validateClass(name, c.RuntimeClasses[name]))
	}
	return errors.Join(errs...)
}

// ClassNames returns the configured class names, sorted.
func (c *Config) ClassNames() []string {
	names := make([]string, 0, len(c.RuntimeClasses))
	for n := range c.RuntimeClasses {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func validateClass(name string, rc RuntimeClass) error {
	if name == "" {
		return fmt.Errorf("runtime class \"\": name the CRI runtime handler, or %q for pods on the runtime's default handler", DefaultClass)
	}
	if len(rc.Mounts) == 0 {
		return fmt.Errorf("runtime class %q has no mounts", name)
	}
	var errs []error
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
	if ns, ok := m.NetworkSpec(); ok {
		return validateNetworkMount(m, ns)
	}
	var errs []error
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
func validateNetworkMount(m Mount, ns netmount.Spec) []error {
	var errs []error
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
