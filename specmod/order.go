package specmod

import (
	"path"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// sortMounts orders mounts by the depth of their destination, keeping the given order among
// mounts of one depth. A runtime mounts in list order, so a parent listed after its child would
// hide the child; containerd's CRI and NRI sort the same way.
func sortMounts(mounts []oci.Mount) {
	sort.SliceStable(mounts, func(i, j int) bool {
		return depth(mounts[i].Destination) < depth(mounts[j].Destination)
	})
}

func depth(p string) int {
	return strings.Count(path.Clean(p), "/")
}
