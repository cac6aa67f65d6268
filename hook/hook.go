package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/idmap"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// Options configure one hook invocation.
type Options struct {
	Config *configs.Config
	// RuntimeClass is --runtime-class: the CRI runtime handler whose class mounts to add.
	// Empty: refused, unless TrustRuntimeHandlerAnnotation.
	RuntimeClass string
	// TrustRuntimeHandlerAnnotation is --trust-runtime-handler-annotation: with no
	// RuntimeClass, take the class from the io.kubernetes.cri-o.RuntimeHandler annotation,
	// else the default class. Only for runtimes that keep pods from setting it.
	TrustRuntimeHandlerAnnotation bool
	// Host checks the host side of the class mounts; hostmount.Checker in production.
	Host specmod.Host
	// Network prepares the host side of network filesystem mounts (ManagerNetwork). Nil: a
	// class with a network mount fails.
	Network engine.Network
	// Mounter makes the mounts in the container (prestart, createRuntime). Nil: the real one,
	// NamespaceMounter.
	Mounter Mounter
	// Idmap asks the kernel whether a source can be idmapped, for a container with a user
	// namespace. Nil (production): in prestart and createRuntime, an idmap.Prober with the
	// container's own user namespace; in precreate, where no container process exists yet,
	// idmap.Default (a placeholder's).
	Idmap engine.Idmapper
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
	// Those with Idmap are idmapped with UserNS.
	Mounts []specmod.Mount
	// UserNS is the user namespace of Pid, opened by the caller (it stays the caller's to
	// close). Required when a mount has Idmap: mountStage opens it for every container with a
	// user namespace of its own, the only ones whose mounts get Idmap.
	UserNS *os.File
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

// engine is the decision engine with the hook's side effects. Only precreate repairs subPath
// binds: by prestart and createRuntime the runtime has made them already. userns is the
// container's user namespace, nil in precreate or for a container without one of its own.
func (opts Options) engine(stage Stage, userns *os.File) *engine.Engine {
	e := &engine.Engine{Config: opts.Config, Host: opts.Host, Network: opts.Network, Idmap: opts.idmapper(userns)}
	if stage == Precreate {
		e.SubPaths = subpath.NewRepairer(opts.Config.KubeletRoot)
	}
	return e
}

// idmapper is opts.Idmap, else a prober with userns, the container's own user namespace
// (prestart, createRuntime), else, with none (precreate: no container process exists yet),
// idmap.Default, which probes with a placeholder's. The engine asks it only for a container
// with a user namespace.
func (opts Options) idmapper(userns *os.File) engine.Idmapper {
	switch {
	case opts.Idmap != nil:
		return opts.Idmap
	case userns != nil:
		return idmap.ProberWith(userns)
	}
	return idmap.Default
}

// precreate adjusts the proposed config.json through the engine's Render, the code path of
// `mountkeeper render`.
func precreate(opts Options, stdin io.Reader, stdout io.Writer) error {
	doc, err := readAllLimited(stdin, "config.json from stdin")
	if err != nil {
		return err
	}
	var meta struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(doc, &meta); err != nil {
		return fmt.Errorf("parse OCI spec: %w", err)
	}
	ctr := containerOf("", meta.Annotations)
	sel, err := SelectClass(opts.RuntimeClass, opts.TrustRuntimeHandlerAnnotation, meta.Annotations)
	if err != nil {
		return engine.RefuseUnclassified(ctr, err)
	}
	if _, _, ok := opts.Config.Class(sel.Handler); !ok {
		return engine.Refuse(sel.Handler, ctr, unknownClass(opts.Config, sel))
	}
	out, _, err := opts.engine(Precreate, nil).Render(context.Background(), sel.Handler, ctr, doc)
	if err != nil {
		return err
	}
	_, err = stdout.Write(append(out, '\n'))
	return err
}

func unknownClass(cfg *configs.Config, sel Selection) error {
	return fmt.Errorf("the class is not in the config (the class came from %s; the config has: %s): hook mode is enabled per runtime class, so a hook for a class the config lacks is a misconfiguration; add the class or correct --runtime-class",
		sel.From, strings.Join(cfg.ClassNames(), ", "))
}

// mountStage is prestart and createRuntime: the engine decides, the Mounter mounts.
func mountStage(opts Options, stdin io.Reader) error {
	data, err := readAllLimited(stdin, "the OCI state from stdin")
	if err != nil {
		return err
	}
	state, err := ParseState(data)
	if err != nil {
		return err
	}
	spec, err := loadSpec(state.Bundle)
	if err != nil {
		return fmt.Errorf("container %s: %w", state.ID, err)
	}
	ctr := containerOf(state.ID, spec.Annotations)
	sel, err := SelectClass(opts.RuntimeClass, opts.TrustRuntimeHandlerAnnotation, state.Annotations, spec.Annotations)
	if err != nil {
		return engine.RefuseUnclassified(ctr, err)
	}
	if _, _, ok := opts.Config.Class(sel.Handler); !ok {
		return engine.Refuse(sel.Handler, ctr, unknownClass(opts.Config, sel))
	}
	req := engine.Request{Handler: sel.Handler, Container: ctr, Mounts: spec.Mounts, Stage: engine.InContainer, Privileged: engine.PrivilegedSpec(spec), UserNamespace: engine.UserNamespaceSpec(spec)}
	if spec.Linux != nil {
		req.RootfsPropagation = spec.Linux.RootfsPropagation
		req.MountNamespace = hasMountNamespace(spec.Linux.Namespaces)
	}
	// A container with a user namespace of its own: the idmap probe and the idmap itself
	// use that namespace, opened once.
	var userns *os.File
	if req.UserNamespace {
		if userns, err = openNamespace(state.Pid, userNamespace); err != nil {
			return engine.Refuse(sel.Handler, ctr, err)
		}
		defer userns.Close()
	}
	d, err := opts.engine(CreateRuntime, userns).Decide(context.Background(), req)
	if err != nil {
		return err
	}
	mounter := opts.Mounter
	if mounter == nil {
		mounter = NamespaceMounter{}
	}
	if err := mounter.MountInContainer(Request{Pid: state.Pid, Rootfs: rootfsPath(state.Bundle, spec), Mounts: d.Mounts, UserNS: userns}); err != nil {
		return engine.Refuse(sel.Handler, ctr, err)
	}
	return nil
}

func hasMountNamespace(nss []oci.LinuxNamespace) bool {
	for _, ns := range nss {
		if ns.Type == oci.MountNamespace {
			return true
		}
	}
	return false
}
