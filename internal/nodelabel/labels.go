// Package nodelabel labels a node with the mountkeeper classes its running runtime can run:
// runtime-handler.mountkeeper.io/<class>=true once the runtime reports the class's handler
// (CRI Status), so that a RuntimeClass whose scheduling.nodeSelector names the label sends
// the class's pods only to nodes whose runtime has loaded the handler. A pod of the class
// stays Pending until then, instead of failing on the node with "no runtime handler".
package nodelabel

import (
	"maps"
	"slices"
	"strings"
)

// Prefix is the prefix of the labels: the key is Prefix + the class (the CRI handler), a DNS
// label, which a label key's name part allows.
const Prefix = "runtime-handler.mountkeeper.io/"

// Key is the label of class.
func Key(class string) string { return Prefix + class }

// Patch is the node labels' merge patch that makes current say exactly which of classes the
// runtime reports (handlers): "true" for each class whose handler is there, null (removed)
// for every other label with Prefix (a class whose handler is gone, a class removed from the
// config). nil when current already says that.
func Patch(current map[string]string, classes, handlers []string) map[string]any {
	patch := map[string]any{}
	want := map[string]bool{}
	for _, c := range classes {
		if slices.Contains(handlers, c) {
			want[Key(c)] = true
		}
	}
	for k := range want {
		if current[k] != "true" {
			patch[k] = "true"
		}
	}
	for k := range current {
		if strings.HasPrefix(k, Prefix) && !want[k] {
			patch[k] = nil
		}
	}
	if len(patch) == 0 {
		return nil
	}
	return patch
}

// RemoveAll is the merge patch that removes every label with Prefix from current (nil when
// there is none): the uninstall's.
func RemoveAll(current map[string]string) map[string]any {
	return Patch(current, nil, nil)
}

// Describe says what patch does, in one line, keys sorted.
func Describe(patch map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(patch)) {
		if patch[k] == nil {
			parts = append(parts, "-"+k)
		} else {
			parts = append(parts, "+"+k)
		}
	}
	return strings.Join(parts, " ")
}
