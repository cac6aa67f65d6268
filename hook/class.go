package hook

import (
	"fmt"

	"github.com/mountkeeper/mountkeeper/classmount"
	"github.com/mountkeeper/mountkeeper/configs"
)

// RuntimeHandlerAnnotation is where CRI-O writes the CRI runtime handler into a spec
// (io.kubernetes.cri-o.RuntimeHandler, CRI-O's internal/annotations). CRI-O sets it on the
// pod sandbox's spec only, not on the specs of the pod's application containers (checked in
// CRI-O's sandbox_run_linux.go and container_create.go), and hooks.d matches a hook's
// "when.annotations" against the container's and the pod's CRI annotations, where it is
// absent too. containerd writes no handler into the spec at all. So --runtime-class is the
// reliable way to name the class; the annotation is honoured where a runtime does set it.
const RuntimeHandlerAnnotation = "io.kubernetes.cri-o.RuntimeHandler"

// Selection is the runtime class chosen for a container and where the choice came from, so
// that a message about a missing class can say how to fix it.
type Selection struct {
	Handler string // CRI runtime handler; "" is the runtime's default handler
	From    string // "--runtime-class", "annotation ...", or "default"
}

// Class is the config's class name for the selection.
func (s Selection) Class() string { return configs.ClassName(s.Handler) }

func (s Selection) String() string {
	return fmt.Sprintf("runtime class %q (from %s)", s.Class(), s.From)
}

// SelectClass picks the runtime class: --runtime-class when given, else the runtime handler
// annotation of the first annotation map that has it (the OCI state's, then the spec's), else
// the default class.
func SelectClass(flag string, annotations ...map[string]string) Selection {
	if flag != "" {
		return Selection{Handler: flag, From: "--runtime-class"}
	}
	for _, a := range annotations {
		if h, ok := a[RuntimeHandlerAnnotation]; ok {
			return Selection{Handler: h, From: "annotation " + RuntimeHandlerAnnotation}
		}
	}
	return Selection{From: "default: no --runtime-class and no " + RuntimeHandlerAnnotation + " annotation"}
}

// Kubernetes names as the CRI runtimes annotate them: containerd's CRI first, then CRI-O's
// (which uses the kubelet's label names).
var nameAnnotations = [][3]string{
	{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.container-name"},
	{"io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.container.name"},
}

// containerOf identifies a container for messages from the names a CRI runtime annotated the
// spec with, and its runtime ID (precreate has none).
func containerOf(id string, annotations map[string]string) classmount.Container {
	for _, keys := range nameAnnotations {
		if ctr := annotations[keys[2]]; ctr != "" {
			return classmount.Container{Namespace: annotations[keys[0]], Pod: annotations[keys[1]], Name: ctr, ID: id}
		}
	}
	return classmount.Container{ID: id}
}
