// Package metrics is what mountkeeper tells Prometheus: one registry per process, named as
// Prometheus' conventions ask (mountkeeper_ prefix, _total counters, _seconds histograms, base
// units). Labels are bounded sets, never container or pod names: a runtime class (configured
// classes plus "none"), an outcome, a reason category, a mount state.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Outcomes of a CreateContainer decision.
const (
	Added   = "added"    // class mounts added
	Refused = "refused"  // the container was refused; reason says why
	NoClass = "no_class" // the pod's handler has no class: left unchanged
)

// Metrics holds mountkeeper's collectors.
type Metrics struct {
	reg *prometheus.Registry

	decisions      *prometheus.CounterVec
	decisionTime   prometheus.Histogram
	subPathCopies  prometheus.Counter
	subPathRepairs prometheus.Counter
	reconnects     prometheus.Counter
	reloads        *prometheus.CounterVec
	configOK       prometheus.Gauge
}

// New registers mountkeeper's collectors, Go's and the process's on a registry of its own.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mountkeeper_create_container_decisions_total",
		Help: "CreateContainer decisions by runtime class, outcome (added, refused, no_class) and refusal reason.",
	}, []string{"class", "outcome", "reason"})
	m.decisionTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "mountkeeper_create_container_decision_seconds",
		Help:    "Time mountkeeper took to answer CreateContainer.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2},
	})
	m.subPathCopies = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mountkeeper_subpath_copies_total",
		Help: "subPath mounts of atomic-writer volumes bound from a private copy.",
	})
	m.subPathRepairs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mountkeeper_subpath_repairs_total",
		Help: "Stale subPath binds re-bound in place.",
	})
	m.reconnects = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "mountkeeper_runtime_reconnects_total",
		Help: "Times the NRI connection to the runtime ended and the plugin reconnected.",
	})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mountkeeper_config_reloads_total",
		Help: "Config reloads by result (applied, rejected).",
	}, []string{"result"})
	m.configOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mountkeeper_config_last_reload_success",
		Help: "1 if the last config reload was applied (or none was tried), 0 if it was rejected and the previous config stays in force.",
	})
	m.configOK.Set(1)
	m.reg.MustRegister(m.decisions, m.decisionTime, m.subPathCopies, m.subPathRepairs, m.reconnects, m.reloads, m.configOK,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Register adds a collector made elsewhere (NetworkMounts, with the plugin's netmount Manager).
func (m *Metrics) Register(c prometheus.Collector) { m.reg.MustRegister(c) }

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Decision counts one CreateContainer answer that took d. reason is "" unless refused.
// A nil *Metrics counts nothing, so front ends need no checks.
func (m *Metrics) Decision(class, outcome, reason string, d time.Duration) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(class, outcome, reason).Inc()
	m.decisionTime.Observe(d.Seconds())
}

// SubPath counts a decision's subPath copies and repairs.
func (m *Metrics) SubPath(copies, repairs int) {
	if m == nil {
		return
	}
	m.subPathCopies.Add(float64(copies))
	m.subPathRepairs.Add(float64(repairs))
}

// Reconnect counts a reconnection to the runtime.
func (m *Metrics) Reconnect() {
	if m != nil {
		m.reconnects.Inc()
	}
}

// Reload counts a config reload.
func (m *Metrics) Reload(applied bool) {
	if m == nil {
		return
	}
	result, ok := "applied", 1.0
	if !applied {
		result, ok = "rejected", 0
	}
	m.reloads.WithLabelValues(result).Inc()
	m.configOK.Set(ok)
}
