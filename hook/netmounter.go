package hook

import (
	"context"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/netmount"
	"github.com/mountkeeper/mountkeeper/netspec"
)

// ManagerNetwork is the NetworkMounter of a hook invocation: a netmount.Manager on the node's
// state dir. It adopts what an earlier hook or the NRI plugin mounted and mounts what is
// missing, each mount in a scope of its own, so the FUSE daemon outlives the hook process.
//
// Hook mode leaves the mounts in place: a hook runs once per container event and keeps no
// count of the containers using a mount, so it cannot know when the last one is gone. Only the
// NRI plugin unmounts (after unmountGrace); the README says so.
type ManagerNetwork struct {
	cfg  *configs.Config
	log  *logrus.Logger
	once sync.Once
	m    *netmount.Manager
	err  error
}

// NewManagerNetwork returns a NetworkMounter for cfg; the Manager starts on first use.
func NewManagerNetwork(cfg *configs.Config, log *logrus.Logger) *ManagerNetwork {
	return &ManagerNetwork{cfg: cfg, log: log}
}

// HostPath mounts s (or finds it mounted) and returns its host path, waiting at most
// mountTimeout: a hook has no 2 s plugin budget, but a dead server must not hang the runtime.
func (n *ManagerNetwork) HostPath(ctx context.Context, s netspec.Spec, _ string) (string, error) {
	n.once.Do(func() {
		n.m, n.err = netmount.NewManager(netmount.ConfigFrom(n.cfg, n.log))
	})
	if n.err != nil {
		return "", n.err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.MountTimeout)
	defer cancel()
	return n.m.Acquire(ctx, s, "hook")
}

// Release does nothing: hook mode keeps no count of a mount's containers (see above).
func (n *ManagerNetwork) Release(string) {}

// Close stops the Manager's background work; the mounts stay.
func (n *ManagerNetwork) Close() {
	if n.m != nil {
		n.m.Close()
	}
}
