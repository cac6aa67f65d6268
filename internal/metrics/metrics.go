// Package metrics is what mountkeeper tells Prometheus: one registry per process, named as
// Prometheus' conventions ask (mountkeeper_ prefix, _total counters, _seconds histograms, base
// units). Labels are bounded sets, never container or pod names: a runtime class (configured
// classes plus "none"), an outcome, a reason category, a mount state. Every label value is
// documented in docs/metrics.md; TestDocsListEveryLabelValue keeps the two in step (Enums).
package metrics

import (
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/liveupdate"
)

// Outcomes of a CreateContainer decision.
const (
	Added   = "added"    // class mounts added
	Refused = "refused"  // the container was refused; reason says why
	NoClass = "no_class" // the pod's handler has no class: left unchanged
)

// ReasonOther is the reason of a refused decision whose error is not one of mountkeeper's
// refusals (engine.Error): a bug, which should never be counted.
const ReasonOther = "other"

// Reload results.
const (
	Applied  = "applied"
	Rejected = "rejected"
)

// Enums are the values of every label that takes a fixed set of them, by metric and label
// (the class label takes the configured classes, "default" and "none", so it is not here).
var Enums = map[string]map[string][]string{
	"mountkeeper_create_container_decisions_total": {
		"outcome": {Added, Refused, NoClass},
		"reason":  append(append([]string{""}, engine.Reasons...), ReasonOther),
	},
	"mountkeeper_config_reloads_total":             {"result": {Applied, Rejected}},
	"mountkeeper_network_mounts":                   {"state": netmountStates()},
	"mountkeeper_network_unmounts_escalated_total": {"how": {EscalatedForce, EscalatedLazy}},
	"mountkeeper_guard_refusals_total":             {"reason": guardReasons()},
	"mountkeeper_subpath_fallbacks_total":          {"reason": subpath.Reasons},
	"mountkeeper_live_subpath_updates_total":       {"result": liveupdate.UpdateResults},
}

// Metrics holds mountkeeper's collectors.
type Metrics struct {
	reg *prometheus.Registry

	decisions      *prometheus.CounterVec
	decisionTime   prometheus.Histogram
	subPathCopies  prometheus.Counter
	subPathRepairs prometheus.Counter
	reconnects     prometheus.Counter
	connected      prometheus.Gauge
	reloads        *prometheus.CounterVec
	configOK       prometheus.Gauge
	configAt       prometheus.Gauge
}

// New registers mountkeeper's collectors, Go's and the process's on a registry of its own.
// version is the binary's (build_info); the config in force at start-up counts as the first
// successful load.
func New(version string) *Metrics {
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
		Help: "Times the plugin registered with the runtime again after its NRI connection had ended (failed attempts in between are not counted).",
	})
	m.connected = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mountkeeper_runtime_connected",
		Help: "1 while the plugin is registered with the runtime over NRI, 0 otherwise (containers of a class are then refused by the guard, or created without their mounts where no guard is installed).",
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
	m.configAt = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mountkeeper_config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last config load that was applied (the load at start-up included).",
	})
	m.configAt.SetToCurrentTime()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mountkeeper_build_info",
		Help: "Always 1; the labels say which mountkeeper runs: version (git describe) and goversion.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	m.reg.MustRegister(m.decisions, m.decisionTime, m.subPathCopies, m.subPathRepairs, m.reconnects, m.connected,
		m.reloads, m.configOK, m.configAt, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Register adds a collector made elsewhere (NetworkMounts, GuardRefusals).
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

// Connected records that the plugin registered with the runtime (true) or lost its
// connection (false). reconnected says the registration follows an earlier one that ended.
func (m *Metrics) Connected(up, reconnected bool) {
	if m == nil {
		return
	}
	if up {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
	if up && reconnected {
		m.reconnects.Inc()
	}
}

// Reload counts a config reload.
func (m *Metrics) Reload(applied bool) {
	if m == nil {
		return
	}
	result, ok := Applied, 1.0
	if !applied {
		result, ok = Rejected, 0
	}
	m.reloads.WithLabelValues(result).Inc()
	m.configOK.Set(ok)
	if applied {
		m.configAt.SetToCurrentTime()
	}
}
