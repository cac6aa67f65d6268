package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mountkeeper/mountkeeper/internal/guard"
)

// GuardRefusals reports, at scrape time, the refusals the guard recorded in the state dir
// (guard.RecordRefusal): the guard runs as a hook process of its own, so the agent learns of
// them only from there. The counts live on the node, so they keep growing across agent
// restarts. stateDir is asked at each scrape (a reload may move it); failed says why the
// record could not be read.
func GuardRefusals(stateDir func() string, failed func(error)) prometheus.Collector {
	return guardCollector{stateDir, failed}
}

type guardCollector struct {
	stateDir func() string
	failed   func(error)
}

var guardRefusalsDesc = prometheus.NewDesc("mountkeeper_guard_refusals_total",
	"Containers of a runtime class that the guard hook refused because the NRI plugin had not handled them (reason no_key: the plugin never ran on this node; not_handled: it was away or not connected). Counted on the node, across agent restarts.",
	[]string{"class", "reason"}, nil)

func (guardCollector) Describe(ch chan<- *prometheus.Desc) { ch <- guardRefusalsDesc }

func (c guardCollector) Collect(ch chan<- prometheus.Metric) {
	counts, err := guard.ReadRefusals(c.stateDir())
	if err != nil {
		c.failed(err)
		return
	}
	for r, n := range counts {
		ch <- prometheus.MustNewConstMetric(guardRefusalsDesc, prometheus.CounterValue, float64(n), r.Class, r.Reason)
	}
}

func guardReasons() []string { return guard.Reasons }
