// Package runtimewrap is the logic of mountkeeper-runtime, the OCI runtime a class's runtime
// handler runs instead of the node's own (runc, crun): the shape of nvidia-container-runtime.
// At every call that creates a container (`create`, `run`, `restore`: Creating) it refuses a
// container the mountkeeper NRI plugin did not mark (package guard), so that no container of the
// class starts without its class mounts while the plugin is away; everything else, and every admitted container, goes to the real runtime with the
// exact arguments. The runtime builds the spec as it does for any container (its own default
// spec): the wrapper reads it and changes nothing.
//
// One binary serves every class: `runtime configure` links it as <dir>/<class> and writes the
// class's Entry beside the link as <dir>/<class>.json; the wrapper finds its entry through the
// path it was started by (argv[0]), which the runtime takes from the handler's BinaryName
// (containerd) or runtime_path (CRI-O).
package runtimewrap

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/guard"
)

// Entry is what the wrapper of one class needs, written by `runtime configure`.
type Entry struct {
	// Class names the runtime class in refusals.
	Class string `json:"class"`
	// Runtime is the real OCI runtime: the node's default handler's binary at configure time,
	// an absolute path or a name looked up on PATH (as the runtime itself would).
	Runtime string `json:"runtime"`
	// StateDir holds the guard key (mountkeeper's stateDir).
	StateDir string `json:"stateDir"`
}

// EntrySuffix makes an entry's path from its link's.
const EntrySuffix = ".json"

// EntryPath is the entry of the wrapper started as argv0. Only an absolute argv0 says which
// link started it: runtimes start the handler's binary by its configured path.
func EntryPath(argv0 string) (string, error) {
	if !filepath.IsAbs(argv0) {
		return "", fmt.Errorf("started as %q: mountkeeper-runtime must be started by the absolute path of a class's link, which `mountkeeper runtime configure` writes as the handler's binary", argv0)
	}
	return argv0 + EntrySuffix, nil
}

// ParseEntry reads an entry and checks it is complete.
func ParseEntry(path string, data []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, fmt.Errorf("%s: %w: run `mountkeeper runtime configure` again", path, err)
	}
	if e.Class == "" || e.Runtime == "" || e.StateDir == "" {
		return Entry{}, fmt.Errorf("%s: class, runtime and stateDir must all be set: run `mountkeeper runtime configure` again", path)
	}
	return e, nil
}

// Call is an OCI runtime command line (runc's, which crun shares), as far as the wrapper needs
// it.
type Call struct {
	Command   string // the subcommand: create, run, restore, start, delete, state, ...
	ID        string // a call that creates a container: the container ID
	Bundle    string // a call that creates a container: --bundle, "" for the working directory
	Log       string // --log: where the runtime reports errors (containerd reads it back)
	LogFormat string // --log-format: text or json
}

// Creating are the subcommands of runc (and crun, which shares them) that create a container
// from a bundle: create, run, and restore (a container from a checkpoint; containerd's runc shim
// restores instead of creating when a task starts from one). The others act on a container
// that exists (start, exec, kill, delete, checkpoint, update, ...), read state (state, list,
// ps, events, features) or write a file (spec).
var Creating = []string{"create", "run", "restore"}

// Creates says whether the call creates a container: the only calls the wrapper checks.
func (c Call) Creates() bool { return slices.Contains(Creating, c.Command) }

// Global options of runc and crun that take a value; any other option is a switch.
var globalValues = map[string]bool{"root": true, "log": true, "log-format": true, "log-level": true, "criu": true, "rootless": true, "cgroup-manager": true}

// Options of create, run and restore that take a value (runc's and crun's; restore's CRIU
// options as runc and go-runc's RestoreOpts spell them).
var createValues = map[string]bool{
	"bundle": true, "b": true, "console-socket": true, "pidfd-socket": true, "pid-file": true, "preserve-fds": true, "config": true, "f": true,
	"image-path": true, "work-path": true, "parent-path": true, "page-server": true, "manage-cgroups-mode": true, "empty-ns": true, "lsm-profile": true, "lsm-mount-context": true,
}

// ParseCall parses args (without argv[0]); on an error the Call holds what was read (--log). An option it does not know is taken as a switch: if
// that misreads a create, the container ID read is wrong, and the mark check refuses it, so a
// misreading never lets an unmarked container through.
func ParseCall(args []string) (Call, error) {
	var c Call
	i := 0
	for ; i < len(args) && c.Command == ""; i++ {
		name, value, hasValue, isOption := option(args[i])
		switch {
		case !isOption:
			c.Command = args[i]
		case globalValues[name] && !hasValue:
			if i+1 == len(args) {
				return c, fmt.Errorf("option --%s without a value", name)
			}
			i++
			value = args[i]
			fallthrough
		case globalValues[name]:
			switch name {
			case "log":
				c.Log = value
			case "log-format":
				c.LogFormat = value
			}
		}
	}
	if !c.Creates() {
		return c, nil
	}
	for ; i < len(args); i++ {
		if args[i] == "--" {
			if i+1 < len(args) {
				c.ID = args[i+1]
			}
			break
		}
		name, value, hasValue, isOption := option(args[i])
		if !isOption {
			c.ID = args[i]
			break
		}
		if createValues[name] && !hasValue {
			if i+1 == len(args) {
				return c, fmt.Errorf("%s: option -%s without a value", c.Command, name)
			}
			i++
			value = args[i]
		}
		if name == "bundle" || name == "b" {
			c.Bundle = value
		}
	}
	if c.ID == "" {
		return c, fmt.Errorf("%s: no container ID in %q", c.Command, args)
	}
	return c, nil
}

// option splits "--name=value", "--name", "-n" into its parts.
func option(arg string) (name, value string, hasValue, isOption bool) {
	if len(arg) < 2 || arg[0] != '-' {
		return "", "", false, false
	}
	name = strings.TrimLeft(arg, "-")
	name, value, hasValue = strings.Cut(name, "=")
	return name, value, hasValue, true
}

// SpecPath is the bundle's config.json (relative to the working directory, as the runtime
// reads it, when the call names no bundle).
func (c Call) SpecPath() string { return filepath.Join(c.Bundle, "config.json") }

// MaxSpec bounds the config.json the wrapper reads; runtimes write a few KiB.
const MaxSpec = 16 << 20

// Sandbox annotations: each CRI runtime marks its pod sandbox (pause) container by type and
// gives it the pod sandbox's ID as its own. NRI never adjusts a sandbox, so the plugin never
// marks one: the wrapper admits it, as the guard hook (which containerd runs for application
// containers only) did.
var sandboxAnnotations = [][2]string{
	{"io.kubernetes.cri.container-type", "io.kubernetes.cri.sandbox-id"},   // containerd
	{"io.kubernetes.cri-o.ContainerType", "io.kubernetes.cri-o.SandboxID"}, // CRI-O
}

// isSandbox says whether the spec is a pod sandbox's. Both the type and the ID must say so:
// the ID is the runtime's own, random, and a pod cannot know it in advance.
func isSandbox(id string, annotations map[string]string) bool {
	for _, keys := range sandboxAnnotations {
		if annotations[keys[0]] == "sandbox" && annotations[keys[1]] == id {
			return true
		}
	}
	return false
}

// Check says why the container of call, whose config.json is spec, must not be created: nil
// for a pod sandbox and for a container the plugin marked. The error is a refusal in
// mountkeeper's format.
func Check(e Entry, c Call, spec []byte) error {
	var doc struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(spec, &doc); err != nil {
		return engine.Refuse(e.Class, engine.Container{ID: c.ID}, fmt.Errorf("read %s: %w", c.SpecPath(), err))
	}
	if isSandbox(c.ID, doc.Annotations) {
		return nil
	}
	if err := guard.Admit(e.StateDir, c.ID, doc.Annotations); err != nil {
		return engine.Refuse(e.Class, engine.ContainerOf(c.ID, doc.Annotations), err)
	}
	return nil
}

// engineRefusal is the refusal of a create whose command line the wrapper cannot read.
func engineRefusal(e Entry, err error) error {
	return engine.Refuse(e.Class, engine.Container{}, fmt.Errorf("mountkeeper-runtime cannot read this create command line (%w), so it cannot check that the mountkeeper NRI plugin handled the container: report this with the runtime's version", err))
}
