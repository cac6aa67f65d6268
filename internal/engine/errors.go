package engine

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/mountkeeper/mountkeeper/configs"
)

// Container names a container in messages: namespace/pod/name as Kubernetes knows it, or
// whatever part of that the runtime told.
type Container struct {
	Namespace, Pod, Name string
	// ID is the runtime's container ID; it stands in for a name the runtime did not give
	// (CRI-O fills names from kubelet's labels, which other CRI clients may not set).
	ID string
}

func (c Container) String() string {
	name := cmp.Or(c.Name, c.ID, "(unnamed)")
	if c.Pod == "" {
		return name
	}
	return c.Namespace + "/" + c.Pod + "/" + name
}

// Error is a refusal: the container must not be created (or started) as it is. Its message is
// the one every front end shows.
type Error struct {
	// Reason is the refusal's category, for metrics: subpath, network, mount (the class
	// mounts against the container and the host), budget, ... (WithReason).
	Reason    string
	Class     string // runtime class name (configs.ClassName of the handler); "" before one is known
	Container Container
	Err       error
}

func (e *Error) Error() string {
	if e.Class == "" {
		return fmt.Sprintf("mountkeeper: container %s: %s", e.Container, oneLine(e.Err))
	}
	return fmt.Sprintf("mountkeeper: runtime class %q, container %s: %s", e.Class, e.Container, oneLine(e.Err))
}

func (e *Error) Unwrap() error { return e.Err }

// Refuse wraps cause as the refusal of container c of runtime handler handler. A cause that is
// already a refusal is returned as it is, so a message never carries the prefix twice.
func Refuse(handler string, c Container, cause error) error {
	var e *Error
	if errors.As(cause, &e) {
		return cause
	}
	reason := ReasonMount
	var r *reasoned
	if errors.As(cause, &r) {
		reason = r.reason
	}
	return &Error{Class: configs.ClassName(handler), Container: c, Err: cause, Reason: reason}
}

// reasoned tags a cause with the refusal category Refuse records.
type reasoned struct {
	reason string
	err    error
}

func (r *reasoned) Error() string { return r.err.Error() }
func (r *reasoned) Unwrap() error { return r.err }

// WithReason tags cause with the refusal category reason, one of Reasons (a metric label value,
// so from a small fixed set; TestReasonsAreConstants checks every call names one).
func WithReason(reason string, cause error) error { return &reasoned{reason: reason, err: cause} }

// Refusal categories (Error.Reason): the reason label of
// mountkeeper_create_container_decisions_total, each documented in docs/metrics.md.
const (
	ReasonMount   = "mount"   // a class mount does not fit the container or the host (the default)
	ReasonNetwork = "network" // a network filesystem could not be mounted on the host
	ReasonSubPath = "subpath" // a stale or unsafe subPath could not be repaired or copied
	ReasonBudget  = "budget"  // no answer within createBudget
	ReasonPanic   = "panic"   // a bug: the decision panicked, and the container was refused
)

// Reasons lists every refusal category.
var Reasons = []string{ReasonMount, ReasonNetwork, ReasonSubPath, ReasonBudget, ReasonPanic}

// RefuseUnclassified is the refusal of container c before its runtime class is known (a hook
// that cannot tell which class the container has).
func RefuseUnclassified(c Container, cause error) error {
	var e *Error
	if errors.As(cause, &e) {
		return cause
	}
	return &Error{Container: c, Err: cause}
}

// oneLine joins a multi-error into one line: runtimes show the message in a pod event or inside
// their own one-line error, where line breaks are lost or cut.
func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
}
