package hook

import (
	"fmt"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// NetworkMounter is the seam for network filesystem mounts (issue 4, package netmount). In
// hook mode a class mount of a network type is made in two steps: the mounter mounts the
// filesystem on the host, in a scope of its own so its daemon outlives the hook, and returns
// the host path to use as the source; the hook then binds that path into the container like
// any other class mount, with the same checks. The hook never unmounts what the mounter
// prepared: network mounts are shared between containers and belong to the mounter.
//
// Nothing implements it yet; Options.Network is nil and a class with a network mount fails.
type NetworkMounter interface {
	// PrepareHost makes the network filesystem of m available on the host and returns the
	// host path to bind. It must give up in bounded time.
	PrepareHost(class string, m configs.Mount) (source string, err error)
}

// isNetworkMount says whether a config mount needs the network mounter: anything but a
// bind. (configs accepts only bind mounts until issue 4 lands.)
func isNetworkMount(m configs.Mount) bool { return m.Type != "" && m.Type != "bind" }

// prepareNetwork returns the class's edits with the source of every network mount replaced
// by the host path the network mounter prepared. rc.Edits() keeps the config's order, one
// edit per config mount.
func prepareNetwork(nm NetworkMounter, class string, rc configs.RuntimeClass) (specmod.Edits, error) {
	edits := rc.Edits()
	for i, m := range rc.Mounts {
		if !isNetworkMount(m) {
			continue
		}
		if nm == nil {
			return edits, &specmod.MountError{Mount: edits.Mounts[i], Err: fmt.Errorf("type %q needs the network mounter, which this build of the hook does not have", m.Type)}
		}
		src, err := nm.PrepareHost(class, m)
		if err != nil {
			return edits, &specmod.MountError{Mount: edits.Mounts[i], Err: fmt.Errorf("prepare the %s mount on the host: %w", m.Type, err)}
		}
		edits.Mounts[i].Source = src
	}
	return edits, nil
}
