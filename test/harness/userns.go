package harness

import (
	"fmt"
	"os"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UsernsHostID and UsernsLength are the mapping of user-namespaced pods (PodOptions and
// ContainerOptions UserNamespace): container ids 0..65535 are host ids 200000..265535, for
// uids and gids alike, as kubelet would pick for hostUsers: false.
const (
	UsernsHostID = 200000
	UsernsLength = 65536
)

// withUserns adds the pod's user namespace (mode POD, UsernsHostID) to ns when on.
func withUserns(ns *runtimeapi.NamespaceOption, on bool) *runtimeapi.NamespaceOption {
	if on {
		m := []*runtimeapi.IDMapping{{HostId: UsernsHostID, ContainerId: 0, Length: UsernsLength}}
		ns.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}
	}
	return ns
}

func runAsUser(uid *int64) *runtimeapi.Int64Value {
	if uid == nil {
		return nil
	}
	return &runtimeapi.Int64Value{Value: *uid}
}

// AllowUserNamespaces makes the instance's directories on the way to a container's rootfs
// traversable (0711) by the unprivileged host uids of user-namespaced pods: runc fails such a
// sandbox otherwise (remount-propagation ... permission denied).
func (c *Containerd) AllowUserNamespaces() error {
	for _, d := range []string{c.layout.dir, c.layout.path("root"), c.layout.path("state")} {
		if err := os.Chmod(d, 0o711); err != nil {
			return fmt.Errorf("make %s traversable for user namespaces: %w", d, err)
		}
	}
	return nil
}
