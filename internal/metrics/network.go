package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
)

// NetworkMounts reports a netmount.Manager's mounts at scrape time: how many are in each state
// (from its Status), and how many deaths, recoveries and escalated unmounts there were (from
// its Totals, which count released mounts too, so these counters never go down while the agent
// runs). It lives here, not in netmount, so that the hook binary, which mounts through
// netmount, does not link Prometheus (its package init costs every hook's start-up).
func NetworkMounts(status func() []netmount.MountStatus, totals func() netmount.Totals) prometheus.Collector {
	return collector{status, totals}
}

type collector struct {
	status func() []netmount.MountStatus
	totals func() netmount.Totals
}

var (
	mountsDesc = prometheus.NewDesc("mountkeeper_network_mounts",
		"Network filesystem mounts held on the host, by state (idle, mounting, checking, mounted, unmounting, dead, recovering).", []string{"state"}, nil)
	deathsDesc = prometheus.NewDesc("mountkeeper_network_mount_deaths_total",
		"Times a held network mount was found dead (daemon gone, ENOTCONN, no answer).", nil, nil)
	recoveriesDesc = prometheus.NewDesc("mountkeeper_network_mount_recoveries_total",
		"Times a dead network mount was replaced under the running containers.", nil, nil)
	escalatedDesc = prometheus.NewDesc("mountkeeper_network_unmounts_escalated_total",
		"Releases of a network mount whose umount did not finish within the unmount timeout (a dead server), by how it was escalated: force (umount -f), lazy (umount -l, after force did not finish either).", []string{"how"}, nil)
	stuckDesc = prometheus.NewDesc("mountkeeper_network_stuck_calls",
		"The agent's probes of network mounts that did not answer and still run, by server (host:port): each holds a thread in uninterruptible sleep until the server answers. At most one per NFS, CIFS or Ceph server.", []string{"server"}, nil)
)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- mountsDesc
	ch <- deathsDesc
	ch <- recoveriesDesc
	ch <- escalatedDesc
	ch <- stuckDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	count := make(map[string]int, len(netmount.States))
	for _, st := range c.status() {
		count[st.State]++
	}
	for _, s := range netmount.States {
		ch <- prometheus.MustNewConstMetric(mountsDesc, prometheus.GaugeValue, float64(count[s]), s)
	}
	t := c.totals()
	ch <- prometheus.MustNewConstMetric(deathsDesc, prometheus.CounterValue, float64(t.Deaths))
	ch <- prometheus.MustNewConstMetric(recoveriesDesc, prometheus.CounterValue, float64(t.Recoveries))
	ch <- prometheus.MustNewConstMetric(escalatedDesc, prometheus.CounterValue, float64(t.ForcedUnmounts), EscalatedForce)
	ch <- prometheus.MustNewConstMetric(escalatedDesc, prometheus.CounterValue, float64(t.LazyUnmounts), EscalatedLazy)
	// Only servers with stuck calls: a series per server ever probed would only grow.
	for server, n := range t.StuckCalls {
		ch <- prometheus.MustNewConstMetric(stuckDesc, prometheus.GaugeValue, float64(n), server)
	}
}

// The how label of mountkeeper_network_unmounts_escalated_total: umount -f, then umount -l.
const (
	EscalatedForce = "force"
	EscalatedLazy  = "lazy"
)

func netmountStates() []string { return netmount.States }
