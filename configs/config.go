// Package configs holds mountkeeper's configuration: its types, strict loading, validation and
// the embedded default. A config maps CRI runtime handlers (runtime classes) to the mounts their
// containers get.
package configs

import (
	"errors"
	"fmt"
	"path"
	"sort"

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
	SubPathRepair  *bool                   `yaml:"subPathRepair"`
	RuntimeClasses map[string]RuntimeClass `yaml:"runtimeClasses"`
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

// Edits returns the spec edits for a class. The config must have been validated.
func (rc RuntimeClass) Edits() specmod.Edits {
	var e specmod.Edits
	for _, m := range rc.Mounts {
		sm, _ := m.specMount()
		e.Mounts = append(e.Mounts, sm)
	}
	return e
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
	var errs []error
	if m.Type != "" && m.Type != "bind" {
		errs = append(errs, fmt.Errorf("type %q is not supported: this version mounts bind only", m.Type))
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
