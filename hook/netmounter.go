package hook

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// ManagerNetwork is the NetworkMounter of a hook invocation: netmount.EnsureMounted on the
// node's state dir, one mount at a time. It finds a live mount (of an earlier hook or of the
// NRI plugin) and returns at once; otherwise it mounts, in a scope of its own so the FUSE
// daemon outlives the hook process, holding only that mount's lock while it does. It never
// waits on the plugin's state-directory lock, nor touches other mounts.
//
// Hook mode leaves the mounts in place: a hook runs once per container event and keeps no
// count of the containers using a mount, so it cannot know when the last one is gone. Only the
// NRI plugin unmounts (after unmountGrace); docs/network-filesystems.md says so.
type ManagerNetwork struct {
	cfg *configs.Config
	log *logrus.Logger
}

// NewManagerNetwork returns a NetworkMounter for cfg.
func NewManagerNetwork(cfg *configs.Config, log *logrus.Logger) *ManagerNetwork {
	return &ManagerNetwork{cfg: cfg, log: log}
}

// HostPath mounts s (or finds it mounted) and returns its host path, waiting at most
// mountTimeout: a hook has no 2 s plugin budget, but a dead server must not hang the runtime.
func (n *ManagerNetwork) HostPath(ctx context.Context, s netspec.Spec, _ string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.MountTimeout)
	defer cancel()
	return netmount.EnsureMounted(ctx, netmount.ConfigFrom(n.cfg, n.log), s)
}

// Release does nothing: hook mode keeps no count of a mount's containers (see above).
func (n *ManagerNetwork) Release(string) {}
