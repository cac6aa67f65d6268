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
	sortByDepth(mounts, func(m oci.Mount) string { return m.Destination })
}

// sortByDepth is sortMounts for anything that has a destination.
func sortByDepth[T any](items []T, destination func(T) string) {
	sort.SliceStable(items, func(i, j int) bool {
		return depth(destination(items[i])) < depth(destination(items[j]))
	})
}

func depth(p string) int {
	return strings.Count(path.Clean(p), "/")
}
