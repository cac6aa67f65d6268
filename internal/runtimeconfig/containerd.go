// Package runtimeconfig configures a container runtime for mountkeeper's runtime classes, and
// takes that back, without changing how the node runs anything else:
//
//   - Each class gets a runtime handler that is a copy of the node's default handler (same
//     runtime type, every option: cgroup driver, runc binary, root, base spec, ...) whose OCI
//     runtime is mountkeeper-runtime (package runtimewrap) in front of the default's own. The
//     runtime builds a class container's spec as it builds any container's; the wrapper refuses
//     the container at create if the NRI plugin did not handle it.
//   - The handlers go into a drop-in of mountkeeper's own (containerd: a file the main config
//     imports; CRI-O: crio.conf.d). The operator's main file changes by one imports entry at
//     most (containerd), inserted as text: comments, order, mode and owner stay.
//   - Unconfigure removes the drop-in, that imports entry (the main file byte for byte as it
//     was, if nobody changed it since) and the wrapper's files.
//   - Neither takes a class's link and handler away while the runtime still runs containers of
//     the class (InUse): it stops them through the link. Unconfigure refuses; configure keeps
//     a class dropped from the config until it is unused.
//
// The package's builders are pure (documents in, documents out); files.go reads and writes the
// node, restart.go restarts the runtime.
package runtimeconfig

import (
	"fmt"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Paths of containerd's files.
const (
	ContainerdConfigPath = "/etc/containerd/config.toml"
	// ContainerdDropInPath is mountkeeper's drop-in; conf.d/*.toml is the directory
	// containerd's own default config imports.
	ContainerdDropInPath = "/etc/containerd/conf.d/99-mountkeeper.toml"
)

// runcShim is the only runtime type whose OCI runtime binary a handler can name (BinaryName).
const runcShim = "io.containerd.runc.v2"

// criRuntime is the CRI runtime plugin's table in versions 3 and 4 of containerd's config;
// criV2 is the CRI plugin's in version 2 (containerd 1.x, and kind's and microk8s' configs on
// containerd 2.x, which migrates each file as it loads it).
const (
	criRuntime = "io.containerd.cri.v1.runtime"
	criV2      = "io.containerd.grpc.v1.cri"
)

// criTable is the CRI runtime plugin's table in a config of version.
func criTable(version int64) string {
	if version < 3 {
		return criV2
	}
	return criRuntime
}

// containerdFile is one file of containerd's config as loaded: the main file or an import.
type containerdFile struct {
	Path string
	Doc  map[string]any
}

// containerdDropIn returns mountkeeper's drop-in for the effective config (the main file and
// its imports without the drop-in, merged as containerd merges them, in the version-3 form of
// normalizeContainerd), for classes, whose wrapper links are link(class). version is the main
// file's: the drop-in is written in it, so that a node on version 2 keeps one config version
// (containerd 1.x reads no other). It also returns the real runtime
// the wrappers run (the default handler's) and notes for the operator.
func containerdDropIn(effective map[string]any, version int64, classes []string, link func(class string) string) (dropIn []byte, realRuntime string, notes []string, err error) {
	cri := lookup(effective, "plugins", criRuntime)
	defaultName, _ := lookup(cri, "containerd")["default_runtime_name"].(string)
	if defaultName == "" {
		defaultName = "runc"
	}
	runtimes := lookup(cri, "containerd", "runtimes")
	base, ok := runtimes[defaultName].(map[string]any)
	if !ok {
		// containerd's built-in default handler: runc through the v2 shim, no options.
		base = map[string]any{"runtime_type": runcShim}
		notes = append(notes, fmt.Sprintf("the default runtime handler %q is not in the config: the class handlers copy containerd's built-in one (runtime_type %s, no options)", defaultName, runcShim))
	}
	if t, _ := base["runtime_type"].(string); t != runcShim {
		return nil, "", nil, fmt.Errorf("the default runtime handler %q has runtime_type %q: mountkeeper's class handlers put their guard in front of the OCI runtime binary (options.BinaryName), which only %s has; configure a runc handler as the default, or ask for support of %q", defaultName, t, runcShim, t)
	}
	options, _ := base["options"].(map[string]any)
	realRuntime, _ = options["BinaryName"].(string)
	if realRuntime == "" {
		realRuntime = "runc" // the shim finds it on its PATH; so does the wrapper
	}

	handlers := map[string]any{}
	for _, class := range classes {
		if class == defaultName {
			return nil, "", nil, fmt.Errorf("runtime class %q has the name of the default runtime handler: its guard would refuse every pod without a runtime class; rename the class", class)
		}
		h := cloneDoc(base)
		opts, _ := h["options"].(map[string]any)
		if opts == nil {
			opts = map[string]any{}
			h["options"] = opts
		}
		opts["BinaryName"] = link(class)
		if have, ok := runtimes[class].(map[string]any); ok {
			if stale := overrideExtra(h, have); len(stale) > 0 {
				notes = append(notes, fmt.Sprintf("runtime handler %q is also defined outside the drop-in, with %s, which the default handler lacks: the drop-in sets them to their zero values (containerd merges the two)", class, strings.Join(stale, ", ")))
			}
		}
		handlers[class] = h
	}
	plugins := map[string]any{criTable(version): map[string]any{"containerd": map[string]any{"runtimes": handlers}}}
	if disabled, _ := lookup(effective, "plugins", "io.containerd.nri.v1.nri")["disable"].(bool); disabled {
		plugins["io.containerd.nri.v1.nri"] = map[string]any{"disable": false}
		notes = append(notes, "NRI is disabled in the config: the drop-in enables it (mountkeeper is an NRI plugin)")
	}
	body, err := toml.Marshal(map[string]any{"version": version, "plugins": plugins})
	if err != nil {
		return nil, "", nil, err
	}
	header := fmt.Sprintf("# Written by `mountkeeper runtime configure`; `mountkeeper runtime unconfigure` removes it. Do not edit:\n"+
		"# each class's handler is a copy of the default handler %q with mountkeeper-runtime, which refuses\n"+
		"# a container the mountkeeper NRI plugin did not handle, in front of its OCI runtime %s.\n", defaultName, realRuntime)
	return append([]byte(header), body...), realRuntime, notes, nil
}

// overrideExtra sets, in h, every key that have holds and h lacks to the zero value of its
// type, so that merging h over have (as containerd and CRI-O merge drop-ins) leaves exactly
// h. It returns the keys it set.
func overrideExtra(h, have map[string]any) []string {
	var set []string
	for k, v := range have {
		mine, ok := h[k]
		switch {
		case !ok:
			if z, ok := zeroOf(v); ok {
				h[k] = z
				set = append(set, k)
			}
		case isTable(mine) && isTable(v):
			for _, s := range overrideExtra(mine.(map[string]any), v.(map[string]any)) {
				set = append(set, k+"."+s)
			}
		}
	}
	return set
}

func isTable(v any) bool { _, ok := v.(map[string]any); return ok }

func zeroOf(v any) (any, bool) {
	switch v.(type) {
	case string:
		return "", true
	case bool:
		return false, true
	case int64:
		return int64(0), true
	case float64:
		return float64(0), true
	case []any:
		return []any{}, true
	case map[string]any:
		return map[string]any{}, true
	}
	return nil, false
}

// lookup returns the table at keys, or nil.
func lookup(doc map[string]any, keys ...string) map[string]any {
	t := doc
	for _, k := range keys {
		next, ok := t[k].(map[string]any)
		if !ok {
			return nil
		}
		t = next
	}
	return t
}

// merge merges from over to as containerd (mergo with override) and CRI-O do: tables merge key
// by key, anything else is replaced.
func merge(to, from map[string]any) {
	for k, v := range from {
		if ft, ok := v.(map[string]any); ok {
			if tt, ok := to[k].(map[string]any); ok {
				merge(tt, ft)
				continue
			}
		}
		to[k] = cloneValue(v)
	}
}

// containerdVersion is a containerd config file's version: 2 (containerd 1.x; 2.x migrates
// it as it loads it), 3 (containerd 2.0, 2.1) or 4 (2.2 on), which name the plugins alike. A
// file without one is version 1 (containerd before 1.3), which mountkeeper does not read.
func containerdVersion(f containerdFile) (int64, error) {
	v, ok := f.Doc["version"].(int64)
	if !ok || v < 2 {
		version := any("none (version 1)")
		if ok {
			version = v
		}
		return 0, fmt.Errorf("%s has version %v: mountkeeper configures versions 2 to 4 (containerd 1.7 and 2.x); migrate it first (containerd config migrate)", f.Path, version)
	}
	return v, nil
}

// normalizeContainerd moves, in a config document of version 2, what mountkeeper reads of the
// CRI plugin (its containerd table: default_runtime_name, runtimes) to where versions 3 and 4
// have it, as containerd 2.x migrates a version-2 file when it loads it (plugins/cri/runtime's
// configMigration): keys the version-3 table already has stay; a handler's sandbox_mode is
// its sandboxer. doc is changed in place and returned.
func normalizeContainerd(doc map[string]any, version int64) map[string]any {
	if version >= 3 {
		return doc
	}
	old := lookup(doc, "plugins", criV2, "containerd")
	if old == nil {
		return doc
	}
	plugins := lookup(doc, "plugins")
	dst, _ := plugins[criRuntime].(map[string]any)
	if dst == nil {
		dst = map[string]any{}
		plugins[criRuntime] = dst
	}
	to, _ := dst["containerd"].(map[string]any)
	if to == nil {
		to = map[string]any{}
		dst["containerd"] = to
	}
	for k, v := range old {
		if _, ok := to[k]; !ok {
			to[k] = cloneValue(v)
		}
	}
	for _, h := range lookup(to, "runtimes") {
		if h, ok := h.(map[string]any); ok {
			if mode, ok := h["sandbox_mode"]; ok {
				if _, ok := h["sandboxer"]; !ok {
					h["sandboxer"] = mode
					delete(h, "sandbox_mode")
				}
			}
		}
	}
	delete(lookup(doc, "plugins", criV2), "containerd")
	return doc
}
