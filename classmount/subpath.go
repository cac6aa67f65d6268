package classmount

import (
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/bounded"
	"github.com/mountkeeper/mountkeeper/hostmount"
	"github.com/mountkeeper/mountkeeper/subpath"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// repairSubPaths repairs the container's stale kubelet subPath binds in place before the
// runtime mounts them (kubernetes #68211, #127602). It runs for every container, whatever its
// runtime class: the bug is the node's, not a class's. Most containers have no subPath mount
// and pay only for a prefix check; the others pay one statx per subPath mount.
func (e *Engine) repairSubPaths(mounts []oci.Mount) ([]subpath.Repair, error) {
	var sources []string
	for _, m := range mounts {
		if _, ok := subpath.ParseTarget(e.Config.KubeletRoot, m.Source); ok {
			sources = append(sources, m.Source)
		}
	}
	if len(sources) == 0 {
		return nil, nil
	}
	// A subPath of a network volume (an NFS PVC) can hang stat: bounded like the host checks.
	return bounded.Run(hostmount.DefaultTimeout, "check the subPath mounts", func() ([]subpath.Repair, error) {
		return e.SubPaths.RepairSources(sources)
	})
}

// LogRepairs logs each repair of d at info, with the fields an operator searches by.
func (d Decision) LogRepairs(log *logrus.Entry) {
	for _, r := range d.Repairs {
		log.WithFields(logrus.Fields{
			"volume": r.Target.Volume, "kind": r.Kind, "subPath": r.SubPath, "old": r.OldSource, "new": r.NewSource,
		}).Infof("repaired stale subPath mount %s", r.Target.Path)
	}
}
