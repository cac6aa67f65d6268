package netspec

import (
	"fmt"
	"slices"
	"strings"
)

// FUSE mounts and the containers that are not host root.
//
// A FUSE mount admits only the uid that mounted it (host root here) unless it has allow_other:
// a container running as uid 1000, or a user-namespaced container (whose root is an
// unprivileged host uid), gets "Permission denied" on every file, and runc cannot even stat
// the mount point. allow_other lets every uid in; default_permissions makes the kernel check
// the file modes and owners the filesystem reports, as on a local filesystem. Without it the
// FUSE program alone decides, and sshfs, for one, then lets every uid read every file. CSI FUSE
// drivers mount the same way.

// FUSEDefaultOptions are added to the options of a fuse.<program> mount unless its options
// already say (allow_root instead of allow_other counts) or the mount turns them off.
var FUSEDefaultOptions = []string{"allow_other", "default_permissions"}

// WithFUSEDefaults returns the options of a mount of type typ with FUSEDefaultOptions added
// where they are missing, after the given ones. Only fuse.<program> types get them:
// glusterfs's client mounts with allow_other and default_permissions by itself (its mount
// helper refuses both options; its "acl" option replaces default_permissions with POSIX ACL
// checks in the client), and kernel filesystems (nfs, cifs, ceph) check permissions
// themselves.
func WithFUSEDefaults(typ string, opts []string) []string {
	if !strings.HasPrefix(typ, "fuse.") {
		return opts
	}
	out := append([]string(nil), opts...)
	if !hasOption(opts, "allow_other") && !hasOption(opts, "allow_root") {
		out = append(out, "allow_other")
	}
	if !hasOption(opts, "default_permissions") {
		out = append(out, "default_permissions")
	}
	return out
}

// Warnings are what is allowed but probably wrong about s, one line each, for `validate`.
func (s Spec) Warnings() []string {
	var w []string
	if strings.HasPrefix(s.Type, "fuse.") && hasOption(s.Options, "allow_other") && !hasOption(s.Options, "default_permissions") {
		w = append(w, fmt.Sprintf("%s: allow_other without default_permissions lets every uid on the node, and every container of the class whatever its user, do what the FUSE program allows (sshfs: read and write every file as the remote user): add default_permissions so that the kernel checks the file modes", s))
	}
	if s.Type == "glusterfs" && (hasOption(s.Options, "allow_other") || hasOption(s.Options, "default_permissions")) {
		w = append(w, fmt.Sprintf("%s: mount.glusterfs refuses allow_other and default_permissions (its client sets both itself): remove them", s))
	}
	return w
}

// hasOption says whether opts has option name, alone or as name=value.
func hasOption(opts []string, name string) bool {
	return slices.ContainsFunc(opts, func(o string) bool {
		k, _, _ := strings.Cut(o, "=")
		return k == name
	})
}
