//go:build e2e

package e2e

import (
	"testing"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestLiveSubPathRuntime runs live subPath updates (a subPath follows its configMap's updates,
// which kubelet alone never does) through a real runtime and runc: a container of a class with
// subPathUpdates: live mounts a configMap key and a configMap directory with subPath; after
// each of 5 atomic-writer updates (old timestamp directory removed) it reads the new content
// of both; a process that opened the key before the updates still reads the first; the
// container holds its bind and one layer at the path; removing the container removes its
// copies. The real-kubelet test and the latency benchmark are test/e2e's kubelet tests.
func TestLiveSubPathRuntime(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, kind harness.RuntimeKind) { testLiveSubPath(t, kind, false) })
}

// TestLiveSubPathUserNamespace is TestLiveSubPathRuntime in a user-namespaced pod on
// containerd: the key is 0640 and owned by host 0:2000, as kubelet writes a secret for an
// fsGroup; after every update the container sees it as 0:2000 and its root reads it, because
// each layer is idmapped with the container's user namespace like runc's bind of the copy
// (a layer that reached the container un-idmapped would show 65534 and be unreadable).
func TestLiveSubPathUserNamespace(t *testing.T) {
	testLiveSubPath(t, harness.KindContainerd, true)
}

// TestLiveSubPathAgentRestart shows on containerd and CRI-O (runc, NRI over the socket) that
// an agent restart picks the live subPaths up again (an update missed while the agent was away
// is applied when it is back, not lost): the container of TestLiveSubPathRuntime follows one
// update; the agent stops; kubelet's atomic writer swaps ..data once more (old timestamp
// directory removed) and the container keeps the content it has, nobody following; the agent
// starts again on the same state dir and, at its NRI Synchronize, the container reads the
// missed content through both the key and the directory, with no container restart; the next
// update is applied too. The container holds its bind and one layer at each path; the versions
// replaced, the first agent's and the new one's, are removed (the one left is numbered after
// the missed one); removing the container leaves no copy and no mount below the copies. It
// logs the time from the new agent's connection to the container's first read of the missed
// content (the closing note's numbers). The same runs in a user-namespaced pod on containerd:
// the new agent idmaps the versions it puts with the container's user namespace, which it
// learns from the runtime's Synchronize (the container's pid), as the first agent learnt it at
// PostStartContainer.
func TestLiveSubPathAgentRestart(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, kind harness.RuntimeKind) { testLiveSubPathAgentRestart(t, kind, false) })
	t.Run("containerd-userns", func(t *testing.T) { testLiveSubPathAgentRestart(t, harness.KindContainerd, true) })
}
