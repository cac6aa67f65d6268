package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
)

// NetworkMounts reports a netmount.Manager's mounts at scrape time, from its Status: how many
// are in each state, and how many deaths and recoveries there were (over the mounts held
// now). It lives here, not in netmount, so that the hook binary, which mounts through
// netmount, does not link Prometheus (its package init costs every hook's start-up).
func NetworkMounts(status func() []netmount.MountStatus) prometheus.Collector {
	return collector{status}
}

type collector struct{ status func() []netmount.MountStatus }

var (
	mountsDesc = prometheus.NewDesc("mountkeeper_network_mounts",
		"Network filesystem mounts held on the host, by state (mounted, dead, recovering, ...).", []string{"state"}, nil)
	deathsDesc = prometheus.NewDesc("mountkeeper_network_mount_deaths_total",
		"Times a held network mount was found dead (daemon gone, ENOTCONN, no answer), over the mounts held now.", nil, nil)
	recoveriesDesc = prometheus.NewDesc("mountkeeper_network_mount_recoveries_total",
		"Times a dead network mount was replaced under the running containers, over the mounts held now.", nil, nil)
)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- mountsDesc
	ch <- deathsDesc
	ch <- recoveriesDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	count := make(map[string]int, len(netmount.States))
	var deaths, recoveries int
	for _, st := range c.status() {
		count[st.State]++
		deaths += st.Deaths
		recoveries += st.Recoveries
	}
	for _, s := range netmount.States {
		ch <- prometheus.MustNewConstMetric(mountsDesc, prometheus.GaugeValue, float64(count[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(deathsDesc, prometheus.CounterValue, float64(deaths))
	ch <- prometheus.MustNewConstMetric(recoveriesDesc, prometheus.CounterValue, float64(recoveries))
}
