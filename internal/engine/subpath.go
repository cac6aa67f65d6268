package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/hostmount"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// subPathFix is what fixSubPaths did to a container's subPath mounts.
type subPathFix struct {
	copies    []copies.Copy
	repairs   []subpath.Repair
	fallbacks []subpath.Fallback
}

// fixSubPaths makes sure no subPath mount of the container holds a deleted file when the
// runtime mounts it (kubernetes #68211, #127602): subPaths of atomic-writer volumes get a
// private copy where the front end can bind it (SubPathCopies), every other stale bind is
// repaired in place. It runs for every container, whatever its runtime class: the bug is the
// node's, not a class's. Most containers have no subPath mount and pay only for a prefix check.
//
// It never makes a container worse off than kubelet alone would: a subPath it cannot copy or
// repair, for whatever reason, keeps kubelet's bind and is reported as a Fallback, and so is
// every subPath of a check that did not finish in time (subPathCopies.timeout; the copies stop
// and remove what they wrote). The error refuses the container for the one case where
// mountkeeper itself left a subPath without kubelet's bind (subpath.ErrNotMounted).
//
// In a container with a user namespace (userns) the runtime binds a copy idmapped: where the
// kernel cannot idmap the copies' tmpfs (before Linux 6.3) the container gets no copy
// (copiesIdmappable).
func (e *Engine) fixSubPaths(id string, mounts []oci.Mount, userns bool) (subPathFix, error) {
	var sources []string
	for _, m := range mounts {
		if _, ok := subpath.ParseTarget(e.Config.KubeletRoot, m.Source); ok {
			sources = append(sources, m.Source)
		}
	}
	if len(sources) == 0 {
		return subPathFix{}, nil
	}
	timeout := cmp.Or(e.Config.SubPathCopies.Timeout, hostmount.DefaultTimeout)
	// The copies stop when ctx ends: at the same time as the wait below, or at once when the
	// wait ends otherwise.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// A subPath of a network volume (an NFS PVC) can hang stat: bounded like the host checks.
	// Keyed by the sources: a dead volume holds at most one stuck check.
	f, err := bounded.Do(bounded.Default, timeout, bounded.Key{Paths: sources}, "check the subPath mounts", func() (subPathFix, error) {
		var f subPathFix
		rest := sources
		if e.SubPathCopies != nil {
			if err := e.copiesIdmappable(userns); err != nil {
				f.fallbacks = uncopied(e.SubPathCopies.Copyable(sources), err)
			} else {
				f.copies, rest, f.fallbacks = e.SubPathCopies.CopySources(ctx, id, sources)
			}
		}
		repairs, fallbacks, err := e.SubPaths.RepairSources(rest)
		f.repairs, f.fallbacks = repairs, append(f.fallbacks, fallbacks...)
		return f, err
	})
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, subpath.ErrNotMounted):
		return f, err
	}
	// The check did not finish (no answer in time, no free slot, a panic): every subPath
	// keeps kubelet's bind. A copy still running stops at its next entry and removes what it
	// wrote; Remove takes what was finished before.
	cancel()
	if e.SubPathCopies != nil {
		_ = e.SubPathCopies.Remove(id)
	}
	return subPathFix{fallbacks: subpath.Fallbacks(e.Config.KubeletRoot, sources, err)}, nil
}

// LogRepairs logs each repair and copy of d at info, and each fallback at warning, with the
// fields an operator searches by.
func (d Decision) LogRepairs(log *logrus.Entry) {
	for _, r := range d.Repairs {
		log.WithFields(logrus.Fields{
			"volume": r.Target.Volume, "kind": r.Kind, "subPath": r.SubPath, "old": r.OldSource, "new": r.NewSource,
		}).Infof("repaired stale subPath mount %s", r.Target.Path)
	}
	for _, c := range d.Copies {
		log.WithFields(logrus.Fields{
			"volume": c.Target.Volume, "kind": c.Kind, "subPath": c.SubPath, "copy": c.Path, "bytes": c.Bytes, "entries": c.Entries, "live": c.Live,
		}).Infof("subPath mount %s: bound from a private copy", c.Target.Path)
	}
	for _, f := range d.Fallbacks {
		fields := logrus.Fields{"volume": f.Target.Volume, "reason": f.Reason}
		var pe *bounded.PanicError
		if errors.As(f.Err, &pe) {
			fields["stack"] = string(pe.Stack)
		}
		log.WithFields(fields).Warn(f.Error())
	}
}

// copiesIdmappable is nil where the container's copies can be bound as the runtime will bind
// them: always without a user namespace; with one the runtime binds them idmapped, which the
// kernel allows on their tmpfs from Linux 6.3 only (before, the bind fails and the container
// would not start). It is the kernel's answer, asked before any copy is made.
func (e *Engine) copiesIdmappable(userns bool) error {
	if !userns || e.Idmap == nil {
		return nil
	}
	return e.Idmap.CheckTmpfs()
}

// uncopied is a Fallback for each target that would have had a copy, had the kernel been
// able to idmap it (copiesIdmappable's err): it keeps kubelet's bind, repaired in place if
// stale, as other volumes' subPaths are, and the container starts as kubelet alone would
// start it.
func uncopied(targets []subpath.Target, err error) []subpath.Fallback {
	out := make([]subpath.Fallback, 0, len(targets))
	for _, t := range targets {
		out = append(out, subpath.Fallback{Target: t, Reason: subpath.ReasonError, Err: fmt.Errorf(
			"the container has a user namespace, so its private copy would be bound idmapped, and this kernel cannot idmap the copy's tmpfs (Linux 6.3 or newer can): %w", err)})
	}
	return out
}
