package engine

import (
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/hostmount"
	"github.com/mountkeeper/mountkeeper/internal/subpath"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// fixSubPaths makes sure no subPath mount of the container holds a deleted file when the
// runtime mounts it (kubernetes #68211, #127602): atomic-writer subPaths get a private copy
// where the front end can bind it (SubPathCopies), every other stale bind is repaired in place.
// It runs for every container, whatever its runtime class: the bug is the node's, not a
// class's. Most containers have no subPath mount and pay only for a prefix check.
func (e *Engine) fixSubPaths(id string, mounts []oci.Mount) ([]subpath.Copy, []subpath.Repair, error) {
	var sources []string
	for _, m := range mounts {
		if _, ok := subpath.ParseTarget(e.Config.KubeletRoot, m.Source); ok {
			sources = append(sources, m.Source)
		}
	}
	if len(sources) == 0 {
		return nil, nil, nil
	}
	type fixed struct {
		copies  []subpath.Copy
		repairs []subpath.Repair
	}
	// A subPath of a network volume (an NFS PVC) can hang stat: bounded like the host checks.
	// Keyed by the sources: a dead volume holds at most one stuck check.
	f, err := bounded.Do(bounded.Default, hostmount.DefaultTimeout, bounded.Key{Paths: sources}, "check the subPath mounts", func() (fixed, error) {
		var f fixed
		rest := sources
		if e.SubPathCopies != nil {
			var err error
			if f.copies, rest, err = e.SubPathCopies.CopySources(id, sources); err != nil {
				return f, err
			}
		}
		var err error
		f.repairs, err = e.SubPaths.RepairSources(rest)
		return f, err
	})
	return f.copies, f.repairs, err
}

// LogRepairs logs each repair and copy of d at info, with the fields an operator searches by.
func (d Decision) LogRepairs(log *logrus.Entry) {
	for _, r := range d.Repairs {
		log.WithFields(logrus.Fields{
			"volume": r.Target.Volume, "kind": r.Kind, "subPath": r.SubPath, "old": r.OldSource, "new": r.NewSource,
		}).Infof("repaired stale subPath mount %s", r.Target.Path)
	}
	for _, c := range d.Copies {
		log.WithFields(logrus.Fields{
			"volume": c.Target.Volume, "kind": c.Kind, "subPath": c.SubPath, "copy": c.Path, "bytes": c.Bytes,
		}).Infof("subPath mount %s: bound from a private copy", c.Target.Path)
	}
}
