package nri

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Liveness: a plugin that cannot answer the runtime is dropped by it (its plugin request
// timeout), and then every class pod of the node is refused by the guard; a restart is what
// helps then, so /healthz fails (Healthy) while a request has run past RequestBudget.
//
// Each NRI handler marks its request in flight (begin, end): a start time in a slot of a
// fixed table, no allocation and no lock on the request path.

// RequestBudget is how long an NRI request may run before the plugin counts as unhealthy:
// containerd's and CRI-O's default plugin request timeout, past which the runtime has given
// up on the answer and closes the connection.
const RequestBudget = 2 * time.Second

// requestKind is an NRI request the plugin handles.
type requestKind uint8

const (
	reqConfigure requestKind = iota
	reqSynchronize
	reqRunPodSandbox
	reqCreateContainer
	reqPostStartContainer
	reqStopContainer
	reqRemoveContainer
	numRequestKinds
)

var requestNames = [numRequestKinds]string{"Configure", "Synchronize", "RunPodSandbox", "CreateContainer", "PostStartContainer", "StopContainer", "RemoveContainer"}

func (k requestKind) String() string { return requestNames[k] }

// inflightSlots bounds the requests of one kind tracked at once; more run untracked (the
// runtime sends a few at a time: one per container being created or stopped).
const inflightSlots = 16

// inflight are the NRI requests under way.
type inflight struct {
	// started holds, per kind and slot, when the request there began (UnixNano, 0: free).
	started [numRequestKinds][inflightSlots]atomic.Int64
	now     func() time.Time // time.Now; a test's clock
}

// begin marks a request of kind k in flight and returns its slot (-1: untracked), for end.
func (f *inflight) begin(k requestKind) int {
	t := f.clock().UnixNano()
	for i := range f.started[k] {
		if f.started[k][i].CompareAndSwap(0, t) {
			return i
		}
	}
	return -1
}

// end marks the request of kind k in slot i answered.
func (f *inflight) end(k requestKind, i int) {
	if i >= 0 {
		f.started[k][i].Store(0)
	}
}

func (f *inflight) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// stuck names the oldest request in flight longer than budget; nil if none is.
func (f *inflight) stuck(budget time.Duration) error {
	now := f.clock().UnixNano()
	var oldest int64
	var kind requestKind
	for k := range f.started {
		for i := range f.started[k] {
			if t := f.started[k][i].Load(); t != 0 && (oldest == 0 || t < oldest) {
				oldest, kind = t, requestKind(k)
			}
		}
	}
	if oldest == 0 {
		return nil
	}
	if age := time.Duration(now - oldest); age > budget {
		return fmt.Errorf("the NRI %s request under way has run for %s, past the %s the runtime waits for an answer: the plugin is stuck", kind, age.Round(time.Millisecond), budget)
	}
	return nil
}

// Healthy says whether the plugin answers the runtime's requests in time (liveness): an error
// names a request in flight past RequestBudget.
func (p *Plugin) Healthy() error { return p.requests.stuck(RequestBudget) }
