//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

const networkConfig = `
unmountGrace: 2s
createBudget: 1500ms
runtimeClasses:
  mk-sshfs:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [SSHOPTS]}
  mk-dead:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:/", destination: /data, options: [DEADOPTS]}
  mk-nfs:
    mounts:
      - {type: nfs, source: "127.0.0.1:/export", destination: /data}
  mk-plain:
    mounts:
      - {source: SRC/plain, destination: /plain}
`

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

func testNetworkFilesystem(t *testing.T, kind harness.RuntimeKind) {
	work := harness.WorkDir(t, "mk-net-")
	sshd := startHelloSSHD(t, work)
	// The mk-dead class's server runs now and is stopped before its pods come.
	stopped, err := harness.StartSSHD(filepath.Join(work, "stopped"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopped.Stop)
	cfg := strings.NewReplacer("EXPORT", sshd.Export(), "SSHOPTS", strings.Join(sshd.ClientOptions(), ", "), "DEADOPTS", strings.Join(stopped.ClientOptions(), ", ")).Replace(networkConfig)

	plugCg, err := harness.NewCgroup2(filepath.Base(work) + "-plugin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plugCg.Remove() })
	n := newNodeWith(t, kind, []string{"mk-sshfs", "mk-dead", "mk-nfs", "mk-plain"}, cfg, plugCg.Dir)
	if err := os.MkdirAll(filepath.Join(n.src(), "plain"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := *n.endNetworkScopes().RuntimeClasses["mk-sshfs"].Mounts[0].Network
	hostPath := netmount.HostPath(filepath.Join(n.src(), "state"), spec)

	reader := []string{"sh", "-c", "while true; do if cat /data/hello >/dev/null 2>&1; then echo ok; else echo FAIL; fi >> /tmp/reads; sleep 0.25; done"}
	a1 := n.mustRun("mk-sshfs", "a1", reader)
	a2 := n.mustRun("mk-sshfs", "a2", nil)

	t.Run("containers of the class read the export from one host mount", func(t *testing.T) {
		for _, id := range []string{a1, a2} {
			if out, code := n.sh(id, "cat /data/hello"); code != 0 || out != helloSSHFS {
				t.Errorf("container reads %q (exit %d)", out, code)
			}
		}
		if got := fuseMountsAt(t, hostPath); got != 1 {
			t.Errorf("%d sshfs mounts at %s, want 1", got, hostPath)
		}
	})

	t.Run("killing the plugin's whole cgroup does not interrupt a reader", func(t *testing.T) {
		before, _ := countReads(t, n, a1)
		if err := plugCg.Kill(); err != nil {
			t.Fatal(err)
		}
		// Kill returned once the cgroup was empty: the plugin is dead, and Exited says so once
		// the harness has reaped it, which a loaded machine may delay past a fixed 200 ms.
		testsupport.Eventually(t, 10*time.Second, 100*time.Millisecond, "the plugin's exit after cgroup.kill of its cgroup", n.plugin.Exited)
		time.Sleep(2 * time.Second)
		ok, fails := countReads(t, n, a1)
		if fails > 0 || ok < before+5 {
			t.Errorf("reads after the kill: %d ok (from %d), %d failed", ok, before, fails)
		}
	})

	t.Run("the restarted plugin adopts the mount and serves new containers", func(t *testing.T) {
		n.startPluginIn(plugCg.Dir)
		a3 := n.mustRun("mk-sshfs", "a3", nil)
		if out, code := n.sh(a3, "cat /data/hello"); code != 0 || out != helloSSHFS {
			t.Errorf("new container reads %q (exit %d)", out, code)
		}
		if got := fuseMountsAt(t, hostPath); got != 1 {
			t.Errorf("%d sshfs mounts at %s after the restart, want 1 (adopted)", got, hostPath)
		}
		if !strings.Contains(n.plugin.Log(), "adopt") {
			t.Errorf("the restarted plugin did not log an adoption:\n%s", n.plugin.Log())
		}
	})

	t.Run("a stopped server fails creation inside the budget; other classes are served", func(t *testing.T) {
		stopped.Stop()
		start := time.Now()
		_, err := n.runContainer("mk-dead", "dead")
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "not ready") {
			t.Fatalf("container of a dead server: %v, want a \"not ready\" error", err)
		}
		if took > 2*time.Second {
			t.Errorf("creation took %s, past the runtime's 2s plugin timeout", took)
		}
		if _, err := n.runContainer("mk-plain", "plain"); err != nil {
			t.Errorf("plain class while a server is dead: %v", err)
		}
	})

	t.Run("nfs without mount.nfs is refused naming the helper and packages", func(t *testing.T) {
		_, err := n.runContainer("mk-nfs", "nfs")
		if err == nil {
			t.Fatal("nfs container created on a node without mount.nfs")
		}
		for _, want := range []string{"mount.nfs", "nfs-common", "nfs-utils"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q: %v", want, err)
			}
		}
	})

	t.Run("removing the last container unmounts after the grace period", func(t *testing.T) {
		for _, c := range n.containersOf("mk-sshfs") {
			cri := n.rt.CRI()
			cri.StopContainer(n.ctx, c)
			if err := cri.RemoveContainer(n.ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		if got := fuseMountsAt(t, hostPath); got != 1 {
			t.Errorf("mount gone before the grace period: %d", got)
		}
		deadline := time.Now().Add(15 * time.Second)
		for fuseMountsAt(t, hostPath) > 0 && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if got := fuseMountsAt(t, hostPath); got != 0 {
			t.Errorf("%d sshfs mounts left 15s after the last container was removed (grace 2s)", got)
		}
	})
}
