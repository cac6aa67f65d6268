package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/nri"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// Options configure one hook invocation.
type Options struct {
	Config *configs.Config
	// RuntimeClass is --runtime-class: the CRI runtime handler whose class mounts to add.
	// Empty: the runtime handler annotation, else the default class.
	RuntimeClass string
	// Host checks the host side of the class mounts; hostmount.Checker in production.
	Host specmod.Host
	// Network prepares the host side of network filesystem mounts. Nil: this build has no
	// network mounter, and a class with a network mount fails.
	Network NetworkMounter
	// Mounter makes the mounts in the container (prestart, createRuntime). Nil: the real one,
	// NamespaceMounter.
	Mounter Mounter
}

// Mounter makes class mounts inside a container's mount namespace, all or nothing.
type Mounter interface {
	MountInContainer(req Request) error
}

// Request is what a Mounter is asked to do for one container.
type Request struct {
	Pid    int    // a process in the container's mount namespace (the OCI state's pid)
	Rootfs string // the container's root, as a path in that namespace before pivot_root
	// Mounts in mount order (parents first), each verified against the spec and the host.
	Mounts []specmod.Mount
}

// Run runs one hook invocation: for precreate it reads a config.json from stdin and writes
// the adjusted one to stdout; for prestart and createRuntime it reads the OCI state from
// stdin and makes the class mounts in the container. Errors are one line each, prefixed with
// the class and container they concern.
func Run(stage Stage, opts Options, stdin io.Reader, stdout io.Writer) error {
	if opts.Config == nil {
		return errors.New("hook: no config")
	}
	switch stage {
	case Precreate:
		return precreate(opts, stdin, stdout)
	case Prestart, CreateRuntime:
		return mountStage(opts, stdin)
	}
	_, err := ParseStage(string(stage))
	return err
}

// precreate adjusts the proposed config.json through nri.RenderSpec, the code path of the NRI
// plugin and `mountkeeper render`, which also reports a document that is not a spec.
func precreate(opts Options, stdin io.Reader, stdout io.Writer) error {
	doc, err := readAllLimited(stdin, "config.json from stdin")
	if err != nil {
		return err
	}
	var meta struct {
		Annotations map[string]string `json:"annotations"`
	}
	parsed := json.Unmarshal(doc, &meta) == nil
	sel := SelectClass(opts.RuntimeClass, meta.Annotations)
	if _, _, ok := opts.Config.Class(sel.Handler); parsed && !ok {
		return unknownClass(opts.Config, sel)
	}
	ro := nri.RenderOptions{RepairSubPaths: true}
	if opts.Network != nil {
		ro.Network = opts.Network.PrepareHost
	}
	out, err := nri.RenderSpec(opts.Config, opts.Host, sel.Handler, containerName("", meta.Annotations), doc, ro)
	if err != nil {
		return err
	}
	_, err = stdout.Write(append(out, '\n'))
	return err
}

func unknownClass(cfg *configs.Config, sel Selection) error {
	return fmt.Errorf("%s is not in the config (it has: %s): hook mode is enabled per runtime class, so a hook for a class the config lacks is a misconfiguration; add the class or correct --runtime-class",
		sel, strings.Join(cfg.ClassNames(), ", "))
}

// mountStage is prestart and createRuntime.
func mountStage(opts Options, stdin io.Reader) error {
	data, err := readAllLimited(stdin, "the OCI state from stdin")
	if err != nil {
		return err
	}
	state, err := ParseState(data)
	if err != nil {
		return err
	}
	spec, err := LoadSpec(state.Bundle)
	if err != nil {
		return fmt.Errorf("container %s: %w", state.ID, err)
	}
	sel := SelectClass(opts.RuntimeClass, state.Annotations, spec.Annotations)
	where := fmt.Sprintf("runtime class %q, container %s", sel.Class(), containerName(state.ID, spec.Annotations))
	req, err := plan(opts, sel, spec)
	if err != nil {
		return fmt.Errorf("%s: %s", where, oneLine(err))
	}
	req.Pid = state.Pid
	req.Rootfs = rootfsPath(state.Bundle, spec)
	mounter := opts.Mounter
	if mounter == nil {
		mounter = NamespaceMounter{}
	}
	if err := mounter.MountInContainer(req); err != nil {
		return fmt.Errorf("%s: %s", where, oneLine(err))
	}
	return nil
}

// plan makes the decision for a prestart/createRuntime hook: the class's edits, with the
// host side of network mounts prepared, verified against the spec's mounts and the host, and
// checked against what the runtime has already done and will still do.
func plan(opts Options, sel Selection, spec *oci.Spec) (Request, error) {
	_, rc, ok := opts.Config.Class(sel.Handler)
	if !ok {
		return Request{}, unknownClass(opts.Config, sel)
	}
	if err := checkMountNamespace(spec); err != nil {
		return Request{}, err
	}
	edits, err := prepareNetwork(opts.Network, rc)
	if err != nil {
		return Request{}, err
	}
	if err := edits.Verify(spec.Mounts, opts.Host); err != nil {
		return Request{}, err
	}
	if err := checkHidden(edits.Mounts, spec.Mounts); err != nil {
		return Request{}, err
	}
	rootProp := ""
	if spec.Linux != nil {
		rootProp = spec.Linux.RootfsPropagation
	}
	if err := checkRootfsPropagation(rootProp, edits.Mounts); err != nil {
		return Request{}, err
	}
	return Request{Mounts: mountOrder(edits.Mounts)}, nil
}

// checkMountNamespace refuses a container without a mount namespace of its own: its mounts
// would be the runtime's, i.e. the host's.
func checkMountNamespace(spec *oci.Spec) error {
	if spec.Linux != nil {
		for _, ns := range spec.Linux.Namespaces {
			if ns.Type == oci.MountNamespace {
				return nil
			}
		}
	}
	return errors.New(`the container has no mount namespace of its own (linux.namespaces lacks "mount"): mountkeeper would mount into the runtime's namespace, so it refuses`)
}

// checkHidden refuses a class mount above a mount of the spec: the runtime mounted that one
// before the hook runs, and the class mount would hide it. Through NRI or precreate the
// mounts are sorted instead, so there the spec's mount lands on top.
func checkHidden(mounts []specmod.Mount, existing []oci.Mount) error {
	var errs []error
	for _, m := range mounts {
		for _, e := range existing {
			if strings.HasPrefix(path.Clean(e.Destination), m.Destination+"/") {
				errs = append(errs, &specmod.MountError{Mount: m, Err: fmt.Errorf(
					"the container already has a mount below it, at %s (source %q): the runtime made it before the hook runs, so the class mount would hide it; choose another destination, or use the precreate stage or the NRI plugin, where mounts are ordered", e.Destination, e.Source)})
				break
			}
		}
	}
	return errors.Join(errs...)
}

// checkRootfsPropagation refuses a linux.rootfsPropagation that the runtime applies after the
// hook and that would cut rslave and rshared class mounts from the host: runc re-applies a
// shared or unbindable propagation recursively to / after pivot_root, and unbindable makes
// every mount below it private. (Private and slave it applies before the hooks run; shared
// keeps what the class mounts receive and send.)
func checkRootfsPropagation(rootProp string, mounts []specmod.Mount) error {
	if rootProp != "runbindable" {
		return nil
	}
	var errs []error
	for _, m := range mounts {
		if m.Propagation == specmod.Slave || m.Propagation == specmod.Shared {
			errs = append(errs, &specmod.MountError{Mount: m, Err: errors.New(
				`linux.rootfsPropagation is "runbindable", which the runtime applies to every mount of the container after the hook ran, cutting this mount from the host: remove rootfsPropagation from config.json (or set rslave or rshared)`)})
		}
	}
	return errors.Join(errs...)
}

// mountOrder sorts mounts by destination depth, keeping the given order within a depth, like
// specmod.Apply orders a spec: a parent is mounted before what lies below it.
func mountOrder(mounts []specmod.Mount) []specmod.Mount {
	out := append([]specmod.Mount(nil), mounts...)
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].Destination, "/") < strings.Count(out[j].Destination, "/")
	})
	return out
}

// oneLine joins a multi-error into one line: runc shows a hook's stderr inside its own
// one-line error, and containerd passes that on as a pod event.
func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
}
