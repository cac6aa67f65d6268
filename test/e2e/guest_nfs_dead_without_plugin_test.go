//go:build e2e && guestnfs

package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// TestGuestNFSDeadMountWithoutPlugin is TestGuestNFSDeadServer's control, run by make
// nfs-control, not by make test: the same node (containerd with NRI, runc, the guest's
// nfsd) without mountkeeper, as a node without it would have the dead server: a hard NFSv4.2
// mount made by hand, bound into a pod that reads it. Containers of no class are timed as
// there, with the server alive, dead and alive again, and the whole create's ratio logged:
// what a dead hard mount does to the node's creates by itself.
func TestGuestNFSDeadMountWithoutPlugin(t *testing.T) {
	inGuestNFS(t)
	root := os.Getenv(guestNFSRootEnv)
	testsupport.InstallNFSClient(t, root)
	export := testsupport.NewNFSExport(t, guestNFSDeadExport, filepath.Join(root, "usr", "sbin", "exportfs"))
	export.Serve(t, guestNFSContent, "111")
	// Unmounted after the node's cleanup, which ends the pod that holds a bind of it.
	mnt := harness.WorkDir(t, "mk-nfs-by-hand-")
	testsupport.Run(t, "mount", "-t", "nfs", "-o", "vers=4.2,hard", "127.0.0.1:/stale", mnt)
	t.Cleanup(func() { testsupport.Run(t, "umount", "-l", mnt) })
	n := newNodeOpts(t, harness.KindContainerd, harness.Options{NRIRequestTimeout: guestNFSRequestTimeout}, guestNFSDeadConfig, "")
	nfsd := newGuestNFSD(t, root) // after the node: its cleanup runs first
	pods := n.runPods(podOf{"", "reader"}, podOf{"", "plain"})
	readerPod, plainPod := pods[0], pods[1]
	reader, _, refused, err := n.timedContainer(readerPod, "reader", readLoop("0.2"), harness.Mount{HostPath: mnt, ContainerPath: "/data"})
	if err = errors.Join(refused, err); err != nil {
		t.Fatal(err)
	}
	readsExport(t, n, reader)

	const count = 9
	alive := n.timedCreates(plainPod, "alive", count)
	nfsd.stop()
	// The dead phase begins as TestGuestNFSDeadServer's does, when the plugin finds the mount
	// dead: a stat of it, forced to the server, does not answer within netmount.ProbeTimeout.
	// Reads meanwhile may still be answered from the client's cache.
	testsupport.Eventually(t, 20*time.Second, 100*time.Millisecond, "a statfs of the mount without answer after nfsd stopped", func() bool {
		return statfsHangs(t, mnt, netmount.ProbeTimeout)
	})
	dead := n.timedCreates(plainPod, "dead", count)
	nfsd.start()
	testsupport.Eventually(t, 60*time.Second, 100*time.Millisecond, "a statfs of the mount answered once nfsd started", func() bool {
		return !statfsHangs(t, mnt, netmount.ProbeTimeout)
	})
	again := n.timedCreates(plainPod, "alive-again", count)
	_, _, _, line := medianRatio(append(slices.Clone(alive), again...), dead)
	t.Logf("without mountkeeper, a dead hard mount made by hand: CreateContainer of %d containers of no class per phase: %s (alive before %s, again %s)",
		count, line, percentile(alive, 50).Round(time.Millisecond), percentile(again, 50).Round(time.Millisecond))
}
