package runtimeconfig

import (
	"errors"
	"fmt"
)

// runtimeView is what the runtime makes of its config, without mountkeeper's drop-in: the
// runtime's effective config (o.Effective) where it can be read, with what the drop-in
// (oldDropIn, as it is on the node) set there taken back to what the other files say; files,
// the merge of the runtime's files without the drop-in, where it cannot, with a note saying
// so. The effective config knows what the files leave out: the built-in default handler's
// options, a version-2 file's migration, the defaults of the runtime's build.
func (o Options) runtimeView(files map[string]any, oldDropIn []byte) (map[string]any, []string, error) {
	if o.Effective == nil {
		return files, nil, nil
	}
	out, err := o.Effective.Read(o)
	if err != nil {
		why := "it failed"
		if errors.Is(err, ErrNoRuntimeCommand) {
			why = "its binary is not there"
		}
		return files, []string{fmt.Sprintf("%s's effective config could not be read (%v): %s, so the handlers copy what its files say", o.Runtime, err, why)}, nil
	}
	view, err := parseDoc(out)
	if err != nil {
		return nil, nil, fmt.Errorf("%s's effective config: %w", o.Runtime, err)
	}
	var own map[string]any
	if len(oldDropIn) > 0 {
		if own, err = parseDoc(oldDropIn); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", o.DropIn, err)
		}
	}
	runtimes, nri := crioRuntimes, crioNRI
	if o.Runtime == "containerd" {
		v, _ := view["version"].(int64)
		view = normalizeContainerd(view, v)
		if own != nil {
			v, _ := own["version"].(int64)
			own = normalizeContainerd(own, v)
		}
		runtimes, nri = containerdRuntimes, containerdNRI
	}
	for name := range lookup(own, runtimes...) {
		restore(view, files, append(runtimes[:len(runtimes):len(runtimes)], name))
	}
	if _, ok := valueAt(own, nri); ok {
		restore(view, files, nri)
	}
	return view, nil, nil
}

// Where mountkeeper's drop-ins set something: the class handlers' table and the NRI switch.
var (
	containerdRuntimes = []string{"plugins", criRuntime, "containerd", "runtimes"}
	containerdNRI      = []string{"plugins", "io.containerd.nri.v1.nri", "disable"}
	crioRuntimes       = []string{"crio", "runtime", "runtimes"}
	crioNRI            = []string{"crio", "nri", "enable_nri"}
)

// restore sets the value at path in view to files' (removes it where files have none).
func restore(view, files map[string]any, path []string) {
	parent := lookup(view, path[:len(path)-1]...)
	if parent == nil {
		return
	}
	key := path[len(path)-1]
	if v, ok := valueAt(files, path); ok {
		parent[key] = cloneValue(v)
	} else {
		delete(parent, key)
	}
}

// valueAt is the value at path in doc.
func valueAt(doc map[string]any, path []string) (any, bool) {
	t := lookup(doc, path[:len(path)-1]...)
	if t == nil {
		return nil, false
	}
	v, ok := t[path[len(path)-1]]
	return v, ok
}

// missingMain is configure's refusal of a containerd main file that does not exist: a file
// created there may be one containerd never reads.
func missingMain(o Options) error {
	return fmt.Errorf("%s does not exist: containerd on this node runs with another file (k3s and RKE2 keep theirs below /var/lib/rancher/<k3s|rke2>/agent/etc/containerd, microk8s below /var/snap/microk8s/current/args) or with its built-in defaults; name the distribution (--distribution, the chart's runtime.distribution) or the file containerd runs with (--config-file, the chart's containerd.configFile); for a containerd on its built-in defaults, write its file first: containerd config default > %s", o.ConfigFile, o.ConfigFile)
}
