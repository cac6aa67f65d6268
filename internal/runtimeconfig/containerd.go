// Package runtimeconfig writes what a container runtime needs to serve mountkeeper's runtime
// classes, the way `nvidia-ctk runtime configure` does for its users: NRI enabled, a runtime
// handler per class, and the guard (package guard) that refuses a class's container the NRI
// plugin did not handle. It is pure: it takes the runtime's current config and returns the new
// one plus the files it refers to; cmd writes them (with a backup, only when they change).
package runtimeconfig

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"

	"github.com/pelletier/go-toml/v2"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/configs/examples"
)

// Options say where things go on the node.
type Options struct {
	// HookPath is the mountkeeper binary the runtime runs as the guard hook.
	HookPath string
	// BaseSpecDir holds the per-class base runtime specs (containerd).
	BaseSpecDir string
}

// Result is what a runtime needs: its new config file and the files that config refers to,
// by path. Notes say what was left out and why.
type Result struct {
	Config []byte
	Files  map[string][]byte
	Notes  []string
}

// ContainerdConfigPath is containerd's usual config file.
const ContainerdConfigPath = "/etc/containerd/config.toml"

// DefaultBaseSpecDir is where the per-class base specs go by default.
const DefaultBaseSpecDir = "/etc/mountkeeper/containerd"

// Containerd returns containerd's config (version 3 or 4, containerd 2.x) with NRI enabled and, for
// each runtime class of cfg, a runtime handler whose base spec carries the guard hook. The
// handler's other settings, where the operator has them already, are kept; a handler that
// already has a base spec of another origin is an error that shows the hook to add by hand.
// The default class gets no guard: its handler runs every pod without a runtime class,
// mountkeeper's own among them, which would then wait for itself.
func Containerd(current []byte, cfg *configs.Config, o Options) (Result, error) {
	doc := map[string]any{}
	if err := toml.Unmarshal(current, &doc); err != nil {
		return Result{}, fmt.Errorf("parse the containerd config: %w", err)
	}
	switch v := doc["version"].(type) {
	case nil:
		doc["version"] = int64(3)
	case int64:
		// Versions 3 (containerd 2.0, 2.1) and 4 (2.2 on) name the plugins alike.
		if v < 3 {
			return Result{}, fmt.Errorf("the containerd config has version %d: mountkeeper configures versions 3 and 4 (containerd 2.x); migrate it first (containerd config migrate)", v)
		}
	default:
		return Result{}, fmt.Errorf("the containerd config's version is %v, not a number", v)
	}
	res := Result{Files: map[string][]byte{}}
	nri := table(doc, "plugins", "io.containerd.nri.v1.nri")
	nri["disable"] = false
	for _, class := range cfg.ClassNames() {
		if class == configs.DefaultClass {
			res.Notes = append(res.Notes, `runtime class "default": no guard; its handler runs every pod without a runtime class, mountkeeper's own among them (use a named runtime class to get the guard)`)
			continue
		}
		rt := table(doc, "plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", class)
		if _, ok := rt["runtime_type"]; !ok {
			rt["runtime_type"] = "io.containerd.runc.v2"
		}
		specPath := filepath.Join(o.BaseSpecDir, class+".json")
		spec, err := baseSpec(class, cfg.StateDir, o.HookPath)
		if err != nil {
			return Result{}, err
		}
		if have, ok := rt["base_runtime_spec"].(string); ok && have != specPath && path.Dir(have) != o.BaseSpecDir {
			return Result{}, fmt.Errorf("runtime handler %q already has base_runtime_spec %s: add this createRuntime hook to it yourself and run again with that handler removed from the config: %s", class, have, guardHookJSON(class, cfg.StateDir, o.HookPath))
		}
		rt["base_runtime_spec"] = specPath
		res.Files[specPath] = spec
	}
	out, err := toml.Marshal(doc)
	if err != nil {
		return Result{}, err
	}
	res.Config = out
	return res, nil
}

// table returns the nested table at keys, creating what is missing.
func table(doc map[string]any, keys ...string) map[string]any {
	t := doc
	for _, k := range keys {
		next, ok := t[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			t[k] = next
		}
		t = next
	}
	return t
}

// guardHook is the createRuntime hook entry of a class.
func guardHook(class, stateDir, hookPath string) map[string]any {
	return map[string]any{
		"path":    hookPath,
		"args":    []string{"mountkeeper", "hook", "guard", "--runtime-class", class, "--state-dir", stateDir},
		"timeout": 5,
	}
}

func guardHookJSON(class, stateDir, hookPath string) string {
	b, _ := json.Marshal(guardHook(class, stateDir, hookPath))
	return string(b)
}

// baseSpec is the class's base runtime spec: the documented example with the guard as its only
// hook.
func baseSpec(class, stateDir, hookPath string) ([]byte, error) {
	var spec map[string]any
	if err := json.Unmarshal(examples.ContainerdBaseRuntimeSpec, &spec); err != nil {
		return nil, fmt.Errorf("the embedded base spec: %w", err)
	}
	spec["hooks"] = map[string]any{"createRuntime": []any{guardHook(class, stateDir, hookPath)}}
	out, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
