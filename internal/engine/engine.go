package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// Stage says where the decided mounts will be made, which decides what must be checked.
type Stage int

const (
	// BeforeCreate: the mounts go into the container's spec before the runtime creates it
	// (NRI CreateContainer, the precreate hook, render). The runtime orders and makes them.
	BeforeCreate Stage = iota
	// InContainer: the prestart/createRuntime hook makes the mounts itself, after the runtime
	// made the spec's own mounts and before it applies the rootfs propagation.
	InContainer
)

// Request is one container, as a front end sees it.
type Request struct {
	Handler   string // CRI runtime handler; "" is the runtime's default handler
	Container Container
	// Mounts are the container's mounts as the runtime will make them (kubelet's volumes,
	// subPath bind targets among them).
	Mounts []oci.Mount
	Stage  Stage
	// MountNamespace says the container has a mount namespace of its own and
	// RootfsPropagation is its linux.rootfsPropagation; both matter only InContainer.
	MountNamespace    bool
	RootfsPropagation string
	// Privileged says the container is privileged in the host's user namespace (PrivilegedSpec,
	// PrivilegedMounts): only such a container gets rshared class mounts, unless its class
	// allows them for every container.
	Privileged bool
	// UserNamespace says the container has a user namespace of its own (Kubernetes
	// hostUsers: false): its class mounts are idmapped to its mappings where the filesystem
	// allows it (Engine.Idmap), and it gets no rshared mount.
	UserNamespace bool
	// PodAnnotations are the pod's annotations; only configs.LiveSubPathsAnnotation is read,
	// and only for a class with subPathUpdates: podOptIn.
	PodAnnotations map[string]string
}

// Decision is what mountkeeper does to one container.
type Decision struct {
	Class string // the class name of the handler, configured or not
	// Configured says the config has the class; without it the container gets no class
	// mounts (its subPath mounts are still repaired).
	Configured bool
	// Mounts are the class mounts, checked against the container and the host, network
	// filesystems bound from their host paths. InContainer they are in mount order.
	Mounts  []specmod.Mount
	Repairs []subpath.Repair
	// Copies replace the container's subPath mounts of atomic-writer volumes: each
	// Copy.Target.Path source is to be bound from Copy.Path instead.
	Copies []copies.Copy
	// Fallbacks are the subPath mounts that keep kubelet's bind because they could not be
	// copied or repaired; the container is not refused for them.
	Fallbacks []subpath.Fallback
	// LiveNotes say why copies the class would have made live stay static, one line each
	// (logged at warning).
	LiveNotes []string
}

// Edits are the decision's changes to the container's spec.
func (d Decision) Edits() specmod.Edits { return specmod.Edits{Mounts: d.Mounts} }

// Network makes network filesystems available on the host for a container.
type Network interface {
	// HostPath returns the host path of s, mounting it (or waiting for it) within ctx, and
	// counts user among its users.
	HostPath(ctx context.Context, s netspec.Spec, user string) (string, error)
	// Release drops user's claims; a decision that fails releases what it claimed.
	Release(user string)
}

// SubPaths repairs stale kubelet subPath binds (subpath.Repairer).
type SubPaths interface {
	// RepairSources returns the repairs, the stale binds left as they are, and an error (a
	// refusal) only for a subPath without kubelet's bind (subpath.ErrNotMounted).
	RepairSources(sources []string) ([]subpath.Repair, []subpath.Fallback, error)
}

// SubPathCopies makes a container's private copies of its atomic-writer subPaths
// (copies.Copies), returning the subPath sources it did not copy.
type SubPathCopies interface {
	// CopySources returns the copies, the sources of other volumes, and the atomic-writer
	// subPaths it could not copy; it stops when ctx ends, leaving nothing of a copy given up.
	CopySources(ctx context.Context, id string, sources []string) ([]copies.Copy, []string, []subpath.Fallback)
	// Copyable returns the targets of sources that CopySources would copy, copying nothing.
	Copyable(sources []string) []subpath.Target
	// Remove removes container id's copies.
	Remove(id string) error
}

// Engine decides. Its fields are the side effects a front end chooses.
type Engine struct {
	Config *configs.Config
	// Host checks the host side of the class mounts (hostmount.Checker).
	Host specmod.Host
	// Network mounts network filesystems; nil refuses classes that have one.
	Network Network
	// SubPaths repairs stale subPath binds BeforeCreate; nil leaves them alone (a dry run).
	SubPaths SubPaths
	// SubPathCopies, where the front end can replace a mount's source (NRI), gives atomic-writer
	// subPaths a private copy instead of a repair; nil repairs them all in place.
	SubPathCopies SubPathCopies
	// Idmap asks the kernel whether a host path can be idmapped (idmap.Prober), for the class
	// mounts of a container with a user namespace; nil takes every source for one that can.
	Idmap Idmapper

	blockOnce sync.Once   // works out blocking, at the first MayBlock
	blocking  *blockFacts // what MayBlock needs to know of Config
}

// Idmapper says whether the mount at a host path can be idmapped: nil if it can, an error
// wrapping *idmap.NotSupportedError if its filesystem cannot, another error if it cannot tell.
type Idmapper interface {
	Check(source string) error
	// CheckTmpfs says, the same way, whether this kernel can idmap a tmpfs (Linux 6.3 or
	// newer), which the subPath copies are on.
	CheckTmpfs() error
}

// Decide returns the decision for one container, or a refusal (*Error). A refused decision
// leaves nothing behind: no claim on a network mount, no subPath copy.
func (e *Engine) Decide(ctx context.Context, r Request) (Decision, error) {
	d, err := e.decide(ctx, &r)
	if err != nil {
		e.release(r.Container.ID)
	}
	return d, err
}

// release drops what a refused decision claimed for container id.
func (e *Engine) release(id string) {
	if e.Network != nil {
		e.Network.Release(id)
	}
	if e.SubPathCopies != nil {
		_ = e.SubPathCopies.Remove(id) // what cannot be removed now, the next Synchronize sweeps
	}
}

// decide and the functions below it take the request by pointer: it is large, and a copy in
// each frame would deepen the stack of the host check, which specmod.Edits.Verify makes from a
// small frame of its own for the same reason.
func (e *Engine) decide(ctx context.Context, r *Request) (Decision, error) {
	class, rc, ok := e.Config.Class(r.Handler)
	d := Decision{Class: class, Configured: ok}
	if r.Stage == BeforeCreate && e.SubPaths != nil && e.Config.SubPathRepair {
		f, err := e.fixSubPaths(r.Container.ID, r.Mounts, r.UserNamespace)
		d.Copies, d.Repairs, d.Fallbacks = f.copies, f.repairs, f.fallbacks
		if ok {
			d.LiveNotes = markLive(rc, r.PodAnnotations, r.UserNamespace, d.Copies, r.Mounts)
		}
		if err != nil {
			return d, Refuse(r.Handler, r.Container, WithReason(ReasonSubPath, err))
		}
	}
	if !ok {
		return d, nil
	}
	mounts, err := e.classMounts(ctx, class, rc, r)
	if err != nil {
		return d, Refuse(r.Handler, r.Container, err)
	}
	d.Mounts = mounts
	return d, nil
}

// classMounts binds the class's network filesystems from their host paths and checks every
// class mount against the container and the host.
func (e *Engine) classMounts(ctx context.Context, class string, rc configs.RuntimeClass, r *Request) ([]specmod.Mount, error) {
	if r.Stage == InContainer && !r.MountNamespace {
		return nil, errNoMountNamespace
	}
	mounts := make([]specmod.Mount, len(rc.Mounts))
	for i, m := range rc.Mounts {
		mounts[i] = m.Bind
		if m.Network == nil {
			continue
		}
		if e.Network == nil {
			return nil, fmt.Errorf("mount %s -> %s: network filesystems are not supported here", m.Network, m.Destination)
		}
		src, err := e.Network.HostPath(ctx, *m.Network, r.Container.ID)
		if err == nil {
			err = specmod.ValidateSource(src) // the rest of the mount was validated at load
		}
		if err != nil {
			return nil, WithReason(ReasonNetwork, fmt.Errorf("mount %s -> %s: %w", m.Network, m.Destination, err))
		}
		mounts[i].Source = src
	}
	bidi := checkBidirectional(class, rc, mounts, r)
	checked := mounts // the host is not asked about mounts refused already
	if bidi != nil {
		checked = slices.DeleteFunc(slices.Clone(mounts), func(m specmod.Mount) bool { return m.Propagation == specmod.Shared })
	}
	// Each class mount passed Mount.Validate when the config was loaded (configs).
	edits := specmod.Edits{Mounts: checked}
	if err := errors.Join(bidi, edits.Verify(r.Mounts, e.Host)); err != nil {
		return nil, err
	}
	if r.UserNamespace {
		if err := e.idmapMounts(class, rc, mounts); err != nil {
			return nil, err
		}
	}
	if r.Stage == InContainer {
		return inContainerOrder(mounts, r)
	}
	return mounts, nil
}

// errNoMountNamespace refuses a hook for a container that shares the runtime's mount namespace.
var errNoMountNamespace = errors.New(`the container has no mount namespace of its own (linux.namespaces lacks "mount"): mountkeeper would mount into the runtime's namespace, so it refuses`)
