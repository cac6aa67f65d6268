//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

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

func testLiveSubPath(t *testing.T, kind harness.RuntimeKind, userns bool) {
	s := startLiveSubPath(t, kind, userns)
	pid, _ := s.n.sh(s.id, "sleep 600 </etc/app.conf >/dev/null 2>&1 & echo -n $!")
	for v := 2; v <= 6; v++ {
		s.write(v)
		s.waitRead(v)
	}
	if out, _ := s.n.sh(s.id, "cat /proc/"+strings.TrimSpace(pid)+"/fd/0"); out != "app-v1" {
		t.Errorf("a process that opened /etc/app.conf before the updates reads %q, want app-v1", out)
	}
	s.checkLayers()
	s.remove()
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

func testLiveSubPathAgentRestart(t *testing.T, kind harness.RuntimeKind, userns bool) {
	s := startLiveSubPath(t, kind, userns)
	s.write(2)
	s.waitRead(2) // the first agent follows: version 1 on top of the first copy
	root := fmt.Sprintf("/proc/%d/root", containerPid(t, s.n, s.id))

	s.n.plugin.Stop()
	s.write(3) // missed: no agent
	if at := watchVersion(root, 3, time.Now().Add(time.Second)); !at.IsZero() {
		t.Fatalf("the container read version 3 with no agent running")
	}
	if out, _ := s.n.sh(s.id, liveRead); out != liveWant(2) {
		t.Fatalf("with no agent, after a swap it missed, the container reads %q, want %q (what it had)", out, liveWant(2))
	}

	logged := newLogTimes("connected to", ": updated")
	s.n.pluginLog = io.MultiWriter(testWriter{t, "mountkeeper"}, logged)
	seen := make(chan time.Time, 1)
	go func() { seen <- watchVersion(root, 3, time.Now().Add(30*time.Second)) }() // 30 s: a hang, not a measure
	started := time.Now()
	s.n.startPlugin() // same config, same state dir
	at := <-seen
	if at.IsZero() {
		t.Fatalf("30 s after the agent started again the container does not read the update it missed; plugin log:\n%s", s.n.plugin.Log())
	}
	connected := logged.at("connected to")
	t.Logf("%s: agent started again: connected %.1f ms after its start; from the connection, the first copy updated after %.1f ms, the container read the missed update (key and directory) after %.1f ms",
		kind, ms(connected.Sub(started)), ms(logged.at(": updated").Sub(connected)), ms(at.Sub(connected)))
	s.waitRead(3) // through the container's own processes too
	// The agent logs the resumption once Resume has returned: after it kicked each copy's
	// update (which the container may read at once) and saved its state.
	if err := s.n.plugin.WaitLog(s.n.ctx, "following 2 live subPath copies again", 1, 10*time.Second); err != nil {
		t.Errorf("the new agent did not log resuming 2 live copies: %v", err)
	}

	s.write(4)
	s.waitRead(4)
	s.checkLayers()
	// Only version 3 of each copy is left: numbered after the missed one (2), which the
	// first agent's version 1 and the base's content went before.
	want := []string{"0.v3", "1.v3"}
	left := s.versionsLeft()
	for deadline := time.Now().Add(15 * time.Second); !slices.Equal(left, want) && time.Now().Before(deadline); left = s.versionsLeft() {
		time.Sleep(100 * time.Millisecond) // removed by the scan of /proc, every 2 s
	}
	if !slices.Equal(left, want) {
		t.Errorf("versions of the copies left in %s: %v, want %v", s.copiesDir(), left, want)
	}
	s.remove()
}
