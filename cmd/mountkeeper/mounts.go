package main

import (
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/nri"
)

// managerMounter is the plugin's Mounter: a netmount.Manager that also reports its mounts
// for `mountkeeper status` (nri.MountReporter) and takes a reloaded config's settings
// (nri.Reconfigurer).
type managerMounter struct {
	*netmount.Manager
	log *logrus.Logger
}

// The plugin reconfigures its mounter only if it is an nri.Reconfigurer.
var _ nri.Reconfigurer = managerMounter{}

func (m managerMounter) Reconfigure(cfg *configs.Config) {
	m.Manager.Reconfigure(netmount.ConfigFrom(cfg, m.log))
}

func (m managerMounter) NetworkMounts() []nri.NetworkMount {
	sts := m.Status()
	out := make([]nri.NetworkMount, len(sts))
	for i, s := range sts {
		out[i] = nri.NetworkMount(s)
	}
	return out
}

func (m managerMounter) StuckCalls() map[string]int { return m.Totals().StuckCalls }
