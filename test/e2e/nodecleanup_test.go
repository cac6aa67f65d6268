//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// TestNodeCleanup: the node's half of an uninstall releases what the agent held and never a
// mount a running container still reads. On real containerd + runc with sshd over
// loopback: a container reads an sshfs class mount; the agent is stopped (as an uninstall
// does first) and `mountkeeper node cleanup` runs: it keeps the mount, names the container
// that holds it (its cgroup carries the container's ID) and exits non-zero, while the reader
// goes on without a failed read. Once the container is gone a second run releases the mount,
// its daemon and scope, and removes the guard key and the state directory: nothing is left.
func TestNodeCleanup(t *testing.T) {
	testenv.Require(t, append([]string{"root"}, sshfsNeeds...)...)
	work := harness.WorkDir(t, "mk-clean-")
	sshd := startHelloSSHD(t, work)
	cfg := strings.NewReplacer("CLASS", "mk-sshfs", "EXPORT", sshd.Export(), "OPTS", strings.Join(sshd.ClientOptions(), ", ")).Replace(upgradeConfig)
	n := newNodeWith(t, harness.KindContainerd, []string{"mk-sshfs"}, cfg, "")
	n.endNetworkScopes()
	state := filepath.Join(n.src(), "state")
	mountsDir := filepath.Join(state, "mounts")
	reader := readLoop("0.1")
	r1 := n.mustRun("mk-sshfs", "r1", reader)
	held := fuseMountsBelow(t, mountsDir)
	if len(held) != 1 {
		t.Fatalf("sshfs mounts below %s: %v, want 1", mountsDir, held)
	}
	daemon := daemonOf(t, held[0].point)
	if _, err := os.Stat(filepath.Join(state, "guard.key")); err != nil {
		t.Fatalf("the agent made no guard key: %v", err)
	}
	n.plugin.Stop()
	cleanup := n.nodeCleanup

	t.Run("a mount a running container uses is kept, and the container named", func(t *testing.T) {
		out, err := cleanup()
		if err == nil || !strings.Contains(out, r1) || !strings.Contains(out, held[0].point) {
			t.Errorf("cleanup under a running container: %v, want a failure naming container %.12s and %s", err, r1, held[0].point)
		}
		time.Sleep(time.Second)
		if m, ok := mountAt(t, mountsDir, held[0].point); !ok || m.id != held[0].id || !alive(daemon) {
			t.Errorf("the container's mount: %+v (present %v), daemon %d alive %v; want mount ID %s kept", m, ok, daemon, alive(daemon), held[0].id)
		}
		if ok, fails := countReads(t, n, r1); fails > 0 || ok == 0 {
			t.Errorf("reader: %d ok, %d failed", ok, fails)
		}
	})

	cri := n.rt.CRI()
	cri.StopContainer(n.ctx, r1)
	if err := cri.RemoveContainer(n.ctx, r1); err != nil {
		t.Fatal(err)
	}
	t.Run("once no container uses it, nothing is left", func(t *testing.T) {
		if _, err := cleanup(); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		if got := fuseMountsBelow(t, mountsDir); len(got) != 0 {
			t.Errorf("mounts left: %v", got)
		}
		testsupport.Eventually(t, 5*time.Second, 100*time.Millisecond, "the FUSE daemon gone", func() bool { return !alive(daemon) })
		if mountScopeExists(t, filepath.Base(held[0].point)) {
			t.Error("the mount's scope is left")
		}
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("the state directory is left: %v", err)
		}
	})
}
