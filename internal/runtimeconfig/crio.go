package runtimeconfig

import (
	"fmt"

	"github.com/pelletier/go-toml/v2"
)

// Paths of CRI-O's files.
const (
	CRIOConfigPath = "/etc/crio/crio.conf"
	CRIOConfigDir  = "/etc/crio/crio.conf.d"
	// CRIODropInName is mountkeeper's drop-in in the config directory: CRI-O reads the
	// directory's files in name order after the main file, so mountkeeper never edits the
	// operator's.
	CRIODropInName = "99-mountkeeper.conf"
)

// crioDefaultRuntime is CRI-O's default_runtime when its config names none.
const crioDefaultRuntime = "crun"

// crioDropIn returns mountkeeper's CRI-O drop-in for the effective config (the main file and
// the other drop-ins, merged in CRI-O's order): for each class, a copy of the default runtime
// handler with runtime_path the class's wrapper link, and NRI enabled. It also returns the
// real runtime the wrappers run (the default handler's runtime_path) and notes.
func crioDropIn(effective map[string]any, classes []string, link func(class string) string) (dropIn []byte, realRuntime string, notes []string, err error) {
	rt := lookup(effective, "crio", "runtime")
	defaultName, _ := rt["default_runtime"].(string)
	if defaultName == "" {
		defaultName = crioDefaultRuntime
	}
	runtimes := lookup(rt, "runtimes")
	base, ok := runtimes[defaultName].(map[string]any)
	if !ok {
		base = map[string]any{"runtime_type": "oci"}
		notes = append(notes, fmt.Sprintf("the default runtime handler %q is not in the config: the class handlers run %q from PATH, as CRI-O does", defaultName, defaultName))
	}
	switch t, _ := base["runtime_type"].(string); t {
	case "", "oci":
	default:
		return nil, "", nil, fmt.Errorf("the default runtime handler %q has runtime_type %q: mountkeeper's class handlers put their guard in front of an OCI runtime binary (runtime_type \"oci\"); configure an oci handler as the default, or ask for support of %q", defaultName, t, t)
	}
	realRuntime, _ = base["runtime_path"].(string)
	if realRuntime == "" {
		realRuntime = defaultName // CRI-O looks the handler's name up on PATH; so does the wrapper
	}
	handlers := map[string]any{}
	for _, class := range classes {
		if class == defaultName {
			return nil, "", nil, fmt.Errorf("runtime class %q has the name of the default runtime handler: its guard would refuse every pod without a runtime class; rename the class", class)
		}
		h := cloneDoc(base)
		h["runtime_path"] = link(class)
		if have, ok := runtimes[class].(map[string]any); ok {
			if stale := overrideExtra(h, have); len(stale) > 0 {
				notes = append(notes, fmt.Sprintf("runtime handler %q is also defined outside the drop-in, with keys the default handler lacks (%v): the drop-in sets them to their zero values", class, stale))
			}
		}
		handlers[class] = h
	}
	crio := map[string]any{"runtime": map[string]any{"runtimes": handlers}}
	if on, _ := lookup(effective, "crio", "nri")["enable_nri"].(bool); !on {
		crio["nri"] = map[string]any{"enable_nri": true}
	}
	body, err := toml.Marshal(map[string]any{"crio": crio})
	if err != nil {
		return nil, "", nil, err
	}
	header := fmt.Sprintf("# Written by `mountkeeper runtime configure --runtime crio`; `mountkeeper runtime unconfigure` removes it.\n"+
		"# Do not edit: each class's handler is a copy of the default handler %q with mountkeeper-runtime,\n"+
		"# which refuses a container the mountkeeper NRI plugin did not handle, in front of %s.\n", defaultName, realRuntime)
	return append([]byte(header), body...), realRuntime, notes, nil
}
