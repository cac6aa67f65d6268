//go:build e2e

package e2e

import (
	"testing"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestNetworkHungServer: a hung network server must not stall the containers of other pods.
// The runtime creates every container of the node under one lock while the plugin answers, so
// a plugin that waits for a network mount holds every container of the node. With the sshfs
// server of a class stopped by SIGSTOP (TCP connects, nothing answers, as with a hung NFS
// server) before its first pod:
//   - 6 class pods and 4 default-runtime pods created at the same moment: the default batch
//     takes less than 3x its own baseline (the same batch alone, measured first in this run);
//   - the class containers are refused with "not ready", the server's address and what to
//     check, the retries (kubelet's) each faster than that baseline batch; none is created;
//   - after SIGCONT the next class container, retried as kubelet would, runs and reads the
//     export, from the same plugin process.
func TestNetworkHungServer(t *testing.T) {
	testenv.Require(t, sshfsNeeds...)
	forEachRuntime(t, testNetworkHungServer)
}
