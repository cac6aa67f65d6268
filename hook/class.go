package hook

import (
	"errors"
	"fmt"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
)

// RuntimeHandlerAnnotation is where CRI-O writes the CRI runtime handler into a spec
// (io.kubernetes.cri-o.RuntimeHandler, CRI-O's internal/annotations). CRI-O sets it on the
// pod sandbox's spec only, not on the specs of the pod's application containers (checked in
// CRI-O's sandbox_run_linux.go and container_create.go), and hooks.d matches a hook's
// "when.annotations" against the container's and the pod's CRI annotations, where it is
// absent too. containerd writes no handler into the spec at all. So --runtime-class is the
// reliable way to name the class; the annotation is honoured only with
// --trust-runtime-handler-annotation, since a pod can set it on itself.
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

// SelectClass picks the runtime class: --runtime-class when given; else, only when the
// operator trusts it (--trust-runtime-handler-annotation), the runtime handler annotation of
// the first annotation map that has it (the OCI state's, then the spec's), else the default
// class. A pod can set that annotation on itself, and hooks.d passes pod annotations through,
// so by default it never chooses a class: a pod would pick another class's host paths.
func SelectClass(flag string, trustAnnotation bool, annotations ...map[string]string) (Selection, error) {
	if flag != "" {
		return Selection{Handler: flag, From: "--runtime-class"}, nil
	}
	if !trustAnnotation {
		return Selection{}, errNoClass
	}
	for _, a := range annotations {
		if h, ok := a[RuntimeHandlerAnnotation]; ok {
			return Selection{Handler: h, From: "annotation " + RuntimeHandlerAnnotation}, nil
		}
	}
	return Selection{From: "default: no --runtime-class and no " + RuntimeHandlerAnnotation + " annotation"}, nil
}

var errNoClass = errors.New("no --runtime-class: hook mode needs it to name the runtime class (the " + RuntimeHandlerAnnotation +
	" annotation, which a pod can set itself, is used only with --trust-runtime-handler-annotation): add --runtime-class NAME to the hook's arguments, one hook entry per class (\"default\" for the runtime's default handler)")

// containerOf identifies a container for messages (precreate has no ID): engine.ContainerOf,
// shared with the runtime wrapper.
func containerOf(id string, annotations map[string]string) engine.Container {
	return engine.ContainerOf(id, annotations)
}
