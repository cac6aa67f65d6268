package subpath

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
)

// Fallback is a subPath mount mountkeeper could not copy or repair: the container keeps
// kubelet's bind and starts exactly as kubelet would start it (a stale bind is left for the
// runtime to fail on, as without mountkeeper). Reason is one of Reasons, the label of the
// fallback counter; Err says what happened, naming the volume and subPath.
type Fallback struct {
	Target Target
	Reason string
	Err    error
}

func (f Fallback) Error() string {
	var e *Error
	if errors.As(f.Err, &e) && e.Target == f.Target { // it names the mount already
		return fmt.Sprintf("%v; it keeps kubelet's bind (%s)", f.Err, f.Reason)
	}
	return fmt.Sprintf("subPath mount %s (pod %s, container %s, volume %s): %v; it keeps kubelet's bind (%s)",
		f.Target.Path, f.Target.PodUID, f.Target.Container, f.Target.Volume, f.Err, f.Reason)
}

// Reasons of a Fallback: the bounded set of values of the fallback counter's reason label.
const (
	// ReasonUnknownVolume: a stale bind whose source lies in no volume directory kubelet's
	// layout shows (a hostPath, a volume mounted elsewhere), so there is nothing to re-bind
	// it from.
	ReasonUnknownVolume = "unknown_volume"
	// ReasonOverBudget: the copy would take the pod past subPathCopies.podBytes or podEntries.
	ReasonOverBudget = "over_budget"
	// ReasonPoolFull: the node's copy tmpfs (nodeBytes, nodeEntries) is full.
	ReasonPoolFull = "pool_full"
	// ReasonNotRegular: the subPath, or an entry below it, is neither a regular file, a
	// directory nor (inside a directory) a symlink: a FIFO, socket or device is never opened.
	ReasonNotRegular = "not_regular"
	// ReasonTimeout: the subPath work overran subPathCopies.timeout; what it wrote is removed.
	ReasonTimeout = "timeout"
	// ReasonNotFound: what the subPath names is no longer in the volume.
	ReasonNotFound = "not_found"
	// ReasonChanged: the volume changed under every attempt to copy it.
	ReasonChanged = "changed"
	// ReasonError: any other failure (the fallback's message says which).
	ReasonError = "error"
)

// Reasons lists every Fallback reason.
var Reasons = []string{ReasonUnknownVolume, ReasonOverBudget, ReasonPoolFull, ReasonNotRegular, ReasonTimeout, ReasonNotFound, ReasonChanged, ReasonError}

// Errors the copy and the lookup of a volume wrap.
var (
	// ErrUnknownVolume says no volume directory of the pod proves to hold what the bind holds.
	ErrUnknownVolume = errors.New("no volume directory of the pod holds the bind's source")
	// ErrOverBudget says a copy would pass the pod's budget.
	ErrOverBudget = errors.New("over the pod's budget for subPath copies")
	// ErrNotRegular says a copy met an entry that is not a regular file, directory or symlink.
	ErrNotRegular = errors.New("not a regular file or directory")
	// ErrPoolFull says a copy would pass the node's bound on copies.
	ErrPoolFull = errors.New("the node's space for subPath copies is full")
	// ErrChanged says the volume changed under every attempt to copy it.
	ErrChanged = errors.New("the volume changed under each copy")
)

// reasonOf classifies the error of a copy or repair into a Fallback reason. Pure.
func reasonOf(err error) string {
	switch {
	case errors.Is(err, ErrUnknownVolume):
		return ReasonUnknownVolume
	case errors.Is(err, ErrOverBudget):
		return ReasonOverBudget
	case errors.Is(err, ErrPoolFull), errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return ReasonPoolFull
	case errors.Is(err, ErrNotRegular):
		return ReasonNotRegular
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, bounded.ErrNoAnswer):
		return ReasonTimeout
	case errors.Is(err, ErrChanged):
		return ReasonChanged
	case errors.Is(err, os.ErrNotExist), errors.Is(err, unix.ENOTDIR):
		return ReasonNotFound
	}
	return ReasonError
}

// NewFallback is the Fallback for target t's error.
func NewFallback(t Target, err error) Fallback {
	return Fallback{Target: t, Reason: reasonOf(err), Err: err}
}

// Fallbacks is the Fallback of every source that is a subPath bind target, for a whole
// subPath check that could not finish (a timeout, no free slot).
func Fallbacks(kubeletRoot string, sources []string, err error) []Fallback {
	var fs []Fallback
	for _, s := range sources {
		if t, ok := ParseTarget(kubeletRoot, s); ok {
			fs = append(fs, NewFallback(t, err))
		}
	}
	return fs
}
