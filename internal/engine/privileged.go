package engine

import (
	"errors"
	"fmt"
	"slices"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// PrivilegedSpec says whether the container a spec describes is privileged in the host's user
// namespace: CAP_SYS_ADMIN in its bounding set and no user namespace of its own (a container
// that is root only in its own user namespace is not, even with every capability there).
func PrivilegedSpec(spec *oci.Spec) bool {
	if spec.Process == nil || spec.Process.Capabilities == nil {
		return false
	}
	var nss []oci.LinuxNamespace
	if spec.Linux != nil {
		nss = spec.Linux.Namespaces
	}
	return !slices.ContainsFunc(nss, func(ns oci.LinuxNamespace) bool { return ns.Type == oci.UserNamespace }) &&
		slices.Contains(spec.Process.Capabilities.Bounding, "CAP_SYS_ADMIN")
}

// UserNamespaceSpec says whether the container a spec describes has a user namespace of its
// own (linux.namespaces has "user").
func UserNamespaceSpec(spec *oci.Spec) bool {
	return spec.Linux != nil && slices.ContainsFunc(spec.Linux.Namespaces, func(ns oci.LinuxNamespace) bool { return ns.Type == oci.UserNamespace })
}

// PrivilegedMounts says whether a container is privileged from its mounts, for a front end
// that is not told its capabilities (NRI): containerd and CRI-O mount /sys read-only unless
// the container is privileged (Kubernetes securityContext.privileged). A container with a user
// namespace of its own is never privileged on the host. It errs towards "not privileged",
// which only refuses rshared mounts, with a message naming the opt-in.
func PrivilegedMounts(mounts []oci.Mount, userns bool) bool {
	if userns {
		return false
	}
	for _, m := range mounts {
		if specmod.CleanDestination(m.Destination) == "/sys" && m.Type == "sysfs" {
			return !slices.Contains(m.Options, "ro")
		}
	}
	return false
}

// checkBidirectional refuses rshared class mounts for an unprivileged container unless the
// class allows it: Kubernetes allows Bidirectional only for privileged containers, because a
// mount made in the container propagates to the host.
func checkBidirectional(class string, rc configs.RuntimeClass, mounts []specmod.Mount, r *Request) error {
	if r.UserNamespace {
		// Whatever the class allows: a container with a user namespace is never privileged
		// on the host (Kubernetes refuses hostUsers: false with privileged), its mounts are
		// made by its own root, and runc fails such a container with an unrelated-looking
		// error.
		var errs []error
		for _, m := range mounts {
			if m.Propagation == specmod.Shared {
				errs = append(errs, &specmod.MountError{Mount: m, Err: errors.New(
					"rshared (Bidirectional) is refused for a container with a user namespace (hostUsers: false), whatever allowBidirectionalForUnprivileged says: its mounts would propagate to the host from a namespace the host does not control; use rslave (HostToContainer), or run the pod with hostUsers: true")})
			}
		}
		return errors.Join(errs...)
	}
	if r.Privileged || rc.AllowBidirectionalForUnprivileged {
		return nil
	}
	var errs []error
	for _, m := range mounts {
		if m.Propagation == specmod.Shared {
			errs = append(errs, &specmod.MountError{Mount: m, Err: fmt.Errorf(
				"rshared (Bidirectional) is for privileged containers only, as in Kubernetes, and this container is not privileged: a mount it made below %s would appear on the host; "+
					"run the container privileged, use rslave (HostToContainer), or set allowBidirectionalForUnprivileged: true on runtime class %q to allow it for every container of the class",
				m.Destination, class)})
		}
	}
	return errors.Join(errs...)
}
