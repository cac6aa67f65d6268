package specmod

import (
	"fmt"
	"strings"
)

// Propagation is the mount propagation of a bind mount as the OCI runtime spells it.
type Propagation string

// The three propagations a container mount can have. The Kubernetes names are accepted by
// ParsePropagation, so a config can say either.
const (
	Private Propagation = "rprivate" // Kubernetes None
	Slave   Propagation = "rslave"   // Kubernetes HostToContainer
	Shared  Propagation = "rshared"  // Kubernetes Bidirectional
)

var propagationNames = map[string]Propagation{
	"rprivate":        Private,
	"none":            Private,
	"rslave":          Slave,
	"hosttocontainer": Slave,
	"rshared":         Shared,
	"bidirectional":   Shared,
}

// ParsePropagation accepts the OCI names (rprivate, rslave, rshared) and the Kubernetes names
// (None, HostToContainer, Bidirectional), case-insensitively. The non-recursive OCI variants
// (private, slave, shared) are refused: a volume's submounts must follow the volume, as they
// do in kubelet.
func ParsePropagation(s string) (Propagation, error) {
	if p, ok := propagationNames[strings.ToLower(s)]; ok {
		return p, nil
	}
	return "", fmt.Errorf("unknown propagation %q: use rprivate (None), rslave (HostToContainer) or rshared (Bidirectional)", s)
}

// KubernetesName is the name Kubernetes uses for p, for messages aimed at cluster operators.
func (p Propagation) KubernetesName() string {
	switch p {
	case Private:
		return "None"
	case Slave:
		return "HostToContainer"
	case Shared:
		return "Bidirectional"
	}
	return string(p)
}

// isPropagationOption reports whether an OCI mount option sets propagation. Such options must
// not be given as extra options: the Propagation field is the only place to say it, so there is
// never a doubt which one wins.
func isPropagationOption(o string) bool {
	switch o {
	case "private", "rprivate", "slave", "rslave", "shared", "rshared", "unbindable", "runbindable":
		return true
	}
	return false
}
