package main

import (
	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/nri"
)

// managerMounter is the plugin's Mounter: a netmount.Manager that also reports its mounts
// for `mountkeeper status` (nri.MountReporter).
type managerMounter struct{ *netmount.Manager }

func (m managerMounter) NetworkMounts() []nri.NetworkMount {
	sts := m.Status()
	out := make([]nri.NetworkMount, len(sts))
	for i, s := range sts {
		out[i] = nri.NetworkMount(s)
	}
	return out
}
