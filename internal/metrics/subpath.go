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

// LiveSubPaths counts the updates of live subPath copies and shows what they hold:
//
//	mountkeeper_live_subpath_updates_total{result}  applied, over_budget, refused, failed
//	mountkeeper_live_subpath_paths                  live subPath copies followed now
//	mountkeeper_live_subpath_retired_bytes          old versions still held open by a process,
//	                                                charged to their pods until freed
type LiveSubPaths struct {
	updates *prometheus.CounterVec
	paths   prometheus.GaugeFunc
	retired prometheus.GaugeFunc
}

// NewLiveSubPaths returns the collectors, every result in results at 0; status reports the
// paths followed and the bytes retired.
func NewLiveSubPaths(results []string, status func() (paths int, retiredBytes int64)) *LiveSubPaths {
	l := &LiveSubPaths{
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mountkeeper_live_subpath_updates_total",
			Help: "Updates of live subPath copies, by result (applied; over_budget, refused, failed: not applied, the container keeps the content it has).",
		}, []string{"result"}),
		paths: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mountkeeper_live_subpath_paths",
			Help: "Live subPath copies followed now.",
		}, func() float64 { n, _ := status(); return float64(n) }),
		retired: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mountkeeper_live_subpath_retired_bytes",
			Help: "Bytes of old versions of live subPath copies that a process still holds open, charged to their pods until freed.",
		}, func() float64 { _, b := status(); return float64(b) }),
	}
	for _, r := range results {
		l.updates.WithLabelValues(r)
	}
	return l
}

// Collectors are what to register.
func (l *LiveSubPaths) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.updates, l.paths, l.retired}
}

// Count counts one update with result. A nil *LiveSubPaths counts nothing.
func (l *LiveSubPaths) Count(result string) {
	if l != nil {
		l.updates.WithLabelValues(result).Inc()
	}
}
