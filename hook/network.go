package hook

import (
	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/netmount"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// NetworkMounter makes network filesystem mounts available on the host. In hook mode a class
// mount of a network type is made in two steps: the mounter mounts the filesystem on the host,
// in a scope of its own so its daemon outlives the hook, and returns the host path; the hook
// then binds that path into the container like any other class mount, with the same checks.
// The hook never unmounts what the mounter prepared: network mounts are shared between
// containers and belong to the mounter.
//
// Options.Network nil means a class with a network mount fails with a clear error.
type NetworkMounter interface {
	// PrepareHost makes s available on the host and returns the host path to bind. It must
	// give up in bounded time.
	PrepareHost(s netmount.Spec) (source string, err error)
}

// prepareNetwork returns the class's edits with every network mount's source replaced by the
// host path the network mounter prepared.
func prepareNetwork(nm NetworkMounter, rc configs.RuntimeClass) (specmod.Edits, error) {
	if nm == nil {
		return rc.Edits(nil)
	}
	return rc.Edits(nm.PrepareHost)
}
