package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// SubPathFallbacks counts the subPath mounts mountkeeper could not copy or repair and left as
// kubelet bound them (the container started as kubelet would start it), by reason. The
// reasons are subpath.Reasons, a bounded set:
//
//	unknown_volume  a stale bind whose source is in no volume directory of the pod (hostPath, ...)
//	over_budget     the copy would pass the pod's budget (subPathCopies.podBytes, podEntries)
//	pool_full       the node's copy tmpfs is full (subPathCopies.nodeBytes, nodeEntries)
//	not_regular     a FIFO, socket or device at the subPath or below it: never opened
//	timeout         the subPath work overran subPathCopies.timeout; the copy was removed
//	not_found       what the subPath names is no longer in the volume
//	changed         the volume changed under every attempt to copy it
//	error           anything else (the log line says what)
//
// It is a collector of its own (registered with Metrics.Register) so that front ends that do
// no subPath work do not show it.
type SubPathFallbacks struct{ c *prometheus.CounterVec }

// NewSubPathFallbacks returns the counter with every reason in reasons at 0, so that a
// dashboard sees the series before the first fallback.
func NewSubPathFallbacks(reasons []string) *SubPathFallbacks {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mountkeeper_subpath_fallbacks_total",
		Help: "subPath mounts left as kubelet bound them because mountkeeper could not copy or repair them, by reason (unknown_volume, over_budget, pool_full, not_regular, timeout, not_found, changed, error).",
	}, []string{"reason"})
	for _, r := range reasons {
		c.WithLabelValues(r)
	}
	return &SubPathFallbacks{c: c}
}

// Collector is what to register.
func (f *SubPathFallbacks) Collector() prometheus.Collector { return f.c }

// Count counts one fallback for reason. A nil *SubPathFallbacks counts nothing.
func (f *SubPathFallbacks) Count(reason string) {
	if f != nil {
		f.c.WithLabelValues(reason).Inc()
	}
}
