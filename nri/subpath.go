package nri

import (
	"fmt"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/hostmount"
	"github.com/mountkeeper/mountkeeper/subpath"
)

// repairSubPaths repairs the container's stale kubelet subPath binds in place before the
// runtime mounts them (kubernetes #68211, #127602). It runs for every container, whatever its
// runtime class: the bug is the node's, not a class's. Most containers have no subPath mount
// and pay only for a prefix check; the others pay one stat per subPath mount.
// who names the container in the error.
func repairSubPaths(cfg *configs.Config, log *logrus.Entry, who string, mounts []oci.Mount) error {
	if !cfg.RepairSubPaths() {
		return nil
	}
	root := cfg.KubeletRootDir()
	var sources []string
	for _, m := range mounts {
		if _, ok := subpath.ParseTarget(root, m.Source); ok {
			sources = append(sources, m.Source)
		}
	}
	if len(sources) == 0 {
		return nil
	}
	// A subPath of a network volume (an NFS PVC) can hang stat: bounded like the host checks.
	repairs, err := hostmount.Bounded(hostmount.DefaultTimeout, "check the subPath mounts", func() ([]subpath.Repair, error) {
		return subpath.NewRepairer(root).RepairSources(sources)
	})
	for _, r := range repairs {
		log.WithFields(logrus.Fields{
			"volume": r.Target.Volume, "kind": r.Kind, "subPath": r.SubPath, "old": r.OldSource, "new": r.NewSource,
		}).Infof("repaired stale subPath mount %s", r.Target.Path)
	}
	if err != nil {
		return fmt.Errorf("mountkeeper: container %s: %s", who, oneLine(err))
	}
	return nil
}
