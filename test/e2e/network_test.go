//go:build e2e

package e2e

import (
	"testing"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestNetworkFilesystem runs an sshfs class on real containerd and CRI-O (runc) with sshd over loopback:
// containers of the class read the export from one shared host mount; killing the plugin's
// whole cgroup does not interrupt a container reading it every 250 ms; the restarted plugin
// adopts the mount and serves new containers; a dead server fails creation inside the budget
// while other classes are served; an nfs class on a node without mount.nfs is refused naming
// the helper and its packages; removing the last container unmounts after the grace period.
func TestNetworkFilesystem(t *testing.T) {
	testenv.Require(t, sshfsNeeds...)
	forEachRuntime(t, testNetworkFilesystem)
}
