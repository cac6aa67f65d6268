package engine

import (
	"fmt"
	"slices"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
)

// markLive marks the copies that follow updates of their volume: all of a class
// with subPathUpdates: live, those of a pod annotated configs.LiveSubPathsAnnotation: "true"
// in a class with podOptIn, none otherwise. The annotation only ever turns on what the class
// allows, for the pod's own copies. A copy stays static, with a note saying why, where its
// mount is Bidirectional (rshared: its propagation is the pod's to keep). In a container with
// a user namespace the layers are idmapped (Copy.Idmap) like the runtime's bind of the copy.
// It returns the notes; any other value of the annotation is one too.
func markLive(rc configs.RuntimeClass, annotations map[string]string, userns bool, copies []copies.Copy, mounts []oci.Mount) []string {
	var notes []string
	switch rc.SubPathUpdates {
	case configs.SubPathUpdatesLive:
	case configs.SubPathUpdatesPodOptIn:
		v, set := annotations[configs.LiveSubPathsAnnotation]
		if v != "true" {
			if set {
				notes = append(notes, fmt.Sprintf("pod annotation %s: %q is not \"true\": the pod's subPaths keep kubelet's semantics (content fixed at start)", configs.LiveSubPathsAnnotation, v))
			}
			return notes
		}
	default:
		return nil
	}
	for i := range copies {
		c := &copies[i]
		switch {
		case bidirectional(mounts, c.Target.Path):
			notes = append(notes, fmt.Sprintf("subPath mount %s (volume %s): stays fixed at start: its mountPropagation is Bidirectional", c.Target.Path, c.Target.Volume))
		default:
			c.Live, c.Idmap = true, userns
		}
	}
	return notes
}

// bidirectional says the container's mount from source is rshared (Bidirectional).
func bidirectional(mounts []oci.Mount, source string) bool {
	for _, m := range mounts {
		if m.Source == source && (slices.Contains(m.Options, "rshared") || slices.Contains(m.Options, "shared")) {
			return true
		}
	}
	return false
}
