//go:build e2e

package e2e

import (
	"testing"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestNetworkUpgrade: replacing the agent must not interrupt the containers reading its
// network mounts. On real containerd + runc with sshd over loopback: two containers read an
// sshfs class mount every 100 ms; the agent holding it is replaced by the current one.
// Replacing the previous release's agent (built from this repository's history,
// harness.PreviousRelease), whose mount has another key (the FUSE default options came after
// it), and replacing the current agent after its config changed while it was stopped (the
// class renamed; the mount's options changed): no read fails, the same host mount (mount ID)
// and FUSE daemon (pid) serve the readers past the grace period, a new container shares that
// mount where the config still asks for it (and the adopted mount is probed and healed: its
// daemon killed, the readers read again), and once every container is gone nothing is left:
// no mount below the state directory, no daemon, no scope cgroup.
func TestNetworkUpgrade(t *testing.T) {
	testenv.Require(t, append([]string{"root", "git", "go"}, sshfsNeeds...)...)
	cases := []upgradeCase{
		{name: "previous release", before: harness.PreviousRelease, classBefore: "mk-sshfs", classAfter: "mk-sshfs", shared: true},
		{name: "class renamed while stopped", classBefore: "mk-sshfs", classAfter: "mk-sshfs-b", shared: true},
		{name: "options changed while stopped", classBefore: "mk-sshfs", classAfter: "mk-sshfs", optionAfter: "ServerAliveInterval=15"},
		{name: "class removed while stopped", classBefore: "mk-sshfs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { testUpgrade(t, c) })
	}
}
