package engine

import (
	"errors"
	"fmt"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/idmap"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// idmapMounts decides, for a container with a user namespace, how each class mount reaches
// it: idmapped to the container's mappings (the container sees the owners the host has, as
// with kubelet's volumes), or, where the kernel cannot idmap the filesystem, un-idmapped if
// the mount allows it (allowWithoutIdmap) and refused otherwise. mounts[i] is rc.Mounts[i].
func (e *Engine) idmapMounts(class string, rc configs.RuntimeClass, mounts []specmod.Mount) error {
	var errs []error
	for i := range mounts {
		var err error
		if e.Idmap != nil {
			err = e.Idmap.Check(mounts[i].Source)
		}
		var ns *idmap.NotSupportedError
		switch {
		case err == nil:
			mounts[i].Idmap = true
		case errors.As(err, &ns) && rc.Mounts[i].AllowWithoutIdmap:
			// Passed as it is: the container sees 65534 owners (README).
		case errors.As(err, &ns):
			errs = append(errs, &specmod.MountError{Mount: mounts[i], Err: fmt.Errorf(
				"%s%v, and the container has a user namespace (hostUsers: false), in which every file would show as owned by 65534 (nobody) and access be checked by host uids: run the pod with hostUsers: true, or set allowWithoutIdmap: true on this mount (runtime class %q, mount %d) to pass it un-idmapped",
				networkName(rc.Mounts[i]), err, class, i+1)})
		default:
			errs = append(errs, &specmod.MountError{Mount: mounts[i], Err: fmt.Errorf(
				"the container has a user namespace, and whether the mount can be idmapped is unknown: %w", err)})
		}
	}
	return errors.Join(errs...)
}

// networkName names a network mount's filesystem ahead of the kernel's answer, whose source
// is only the host path.
func networkName(m configs.Mount) string {
	if m.Network == nil {
		return ""
	}
	return m.Network.String() + ": "
}
