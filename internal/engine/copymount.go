package engine

import (
	"slices"

	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
)

// CopyMountOptions are the options of the mount that binds private copy c in place of a
// container's subPath mount with options orig (which it leaves as they are). The mount is
// read-only whatever orig says: kubelet mounts every atomic-writer volume "ro", and a copy lives
// on the node's shared copy tmpfs, where a container's write would be charged to no pod's
// budget. In a container with a user namespace (userns) kubelet's volume mounts are idmapped
// (NRI does not show the mappings), so the copy's is too: runc maps an "idmap" mount with the
// container's own mappings. A live copy is bound rslave, so that its updates reach the
// container.
func CopyMountOptions(orig []string, c copies.Copy, userns bool) []string {
	opts := slices.DeleteFunc(slices.Clone(orig), func(o string) bool { return o == "rw" || o == "ro" })
	opts = append(opts, "ro")
	if userns && !slices.Contains(opts, "idmap") && !slices.Contains(opts, "ridmap") {
		opts = append(opts, "idmap")
	}
	if c.Live {
		opts = livePropagation(opts)
	}
	return opts
}

// livePropagation gives the options of a live copy's mount rslave propagation (the layers
// reach the container through it) in place of kubelet's.
func livePropagation(opts []string) []string {
	out := slices.DeleteFunc(opts, func(o string) bool {
		switch o {
		case "private", "rprivate", "slave", "rslave", "shared", "rshared", "unbindable", "runbindable":
			return true
		}
		return false
	})
	return append(out, "rslave")
}
