package engine

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/specmod"
)

// inContainerOrder checks what only matters when the hook makes the mounts after the runtime
// made the spec's own, and returns the mounts in the order to make them.
func inContainerOrder(mounts []specmod.Mount, r *Request) ([]specmod.Mount, error) {
	if err := errors.Join(checkHidden(mounts, r.Mounts), checkRootfsPropagation(r.RootfsPropagation, mounts)); err != nil {
		return nil, err
	}
	return mountOrder(mounts), nil
}

// checkHidden refuses a class mount above a mount of the spec: the runtime mounted that one
// before the hook runs, and the class mount would hide it. Before create the mounts are sorted
// instead, so there the spec's mount lands on top.
func checkHidden(mounts []specmod.Mount, existing []oci.Mount) error {
	var errs []error
	for _, m := range mounts {
		for _, e := range existing {
			if strings.HasPrefix(specmod.CleanDestination(e.Destination), specmod.CleanDestination(m.Destination)+"/") {
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
