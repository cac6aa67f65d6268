//go:build e2e

package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// sshfsNeeds are what a test of an sshfs class needs: FUSE, the client, and the server that
// harness.StartSSHD runs.
var sshfsNeeds = []string{"fuse", "sshfs", "/usr/sbin/sshd"}

// helloSSHFS is what startHelloSSHD puts in its export's file "hello".
const helloSSHFS = "hello from sshfs\n"

// startHelloSSHD starts an sshd below dir, stopped when the test ends, whose export holds the
// file "hello" (helloSSHFS) for containers to read through sshfs.
func startHelloSSHD(t *testing.T, dir string) *harness.SSHD {
	t.Helper()
	sshd, err := harness.StartSSHD(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sshd.Stop)
	if err := os.WriteFile(filepath.Join(sshd.Export(), "hello"), []byte(helloSSHFS), 0o644); err != nil {
		t.Fatal(err)
	}
	return sshd
}

// silentServer accepts TCP connections on loopback and never answers: a server that hangs.
type silentServer struct{ port int }

func startSilentServer(t *testing.T) silentServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return silentServer{port: l.Addr().(*net.TCPAddr).Port}
}

const upgradeConfig = `
unmountGrace: 2s
createBudget: 1500ms
runtimeClasses:
  CLASS:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [OPTS]}
`

// healBound is the recovery time the tests hold the plugin to after a FUSE daemon's death:
// a probe every 500ms, one mount (sshfs ~0.2s, GlusterFS ~1s) and the replacement.
const healBound = 10 * time.Second

// healRecovered is what the plugin logs once a heal is done: the new mount is on top and the
// dead one beneath it detached (netmount's retryLoop logs it after replaceDead returned).
const healRecovered = "netmount: recovered:"

// waitRecovered waits until the plugin has logged one recovery more than before. A container
// reads through the new mount as soon as it is on top of the dead one (replaceDead's step 4);
// the dead one is detached just after (step 6): the mounts at the host path are counted only
// once the recovery is logged.
func waitRecovered(t *testing.T, n *node, before int, what string) {
	t.Helper()
	if err := n.plugin.WaitLog(n.ctx, healRecovered, before+1, healBound); err != nil {
		t.Fatalf("%s: the container reads again but the plugin logged no recovery: %v", what, err)
	}
}

// readLoop is a container's command that reads /data/hello every interval (a sleep(1)
// argument) and appends "ok" or "FAIL" to /tmp/reads (countReads).
func readLoop(interval string) []string {
	return []string{"sh", "-c", "while true; do if cat /data/hello >/dev/null 2>&1; then echo ok; else echo FAIL; fi >> /tmp/reads; sleep " + interval + "; done"}
}

// countReads returns how many reads the reader container logged as ok and as failed.
func countReads(t *testing.T, n *node, id string) (ok, fails int) {
	t.Helper()
	out, _ := n.sh(id, "cat /tmp/reads")
	return tallyReads(out)
}

// tallyReads counts the ok and failed reads in a readLoop's log.
func tallyReads(log string) (ok, fails int) {
	return strings.Count(log, "ok"), strings.Count(log, "FAIL")
}

// newContainerMount checks that a container created after the replacement reads the export
// through the readers' host mount (old) when the config still asks for it, else through a
// mount of its own.
func newContainerMount(t *testing.T, n *node, c upgradeCase, r3, mountsDir string, old hostMount) {
	if out, code := n.sh(r3, "cat /data/hello"); code != 0 || out != helloSSHFS {
		t.Errorf("new container reads %q (exit %d)", out, code)
	}
	dev := devOf(n.mountinfoOf(r3, "/data"))
	mounts := fuseMountsBelow(t, mountsDir)
	t.Logf("new container's /data: device %s; host mounts below the state dir: %v", dev, mounts)
	if c.shared && (dev != old.dev || len(mounts) != 1) {
		t.Errorf("new container's /data is device %s, %d host mounts; want the readers' %s and one mount", dev, len(mounts), old.dev)
	}
	if !c.shared && (dev == old.dev || len(mounts) != 2) {
		t.Errorf("new container's /data is device %s, %d host mounts; want a mount of the new options (not %s) beside the readers'", dev, len(mounts), old.dev)
	}
}

// upgradeCase is one way the agent holding a network mount under running readers is replaced
// by the current agent while they read.
type upgradeCase struct {
	name string
	// before is the agent that mounts for the readers ("" is the current one); the current
	// agent replaces it.
	before string
	// The class of the config before and after the replacement ("" after: the config has no
	// network mount any more), and an option the mount gains after it.
	classBefore, classAfter string
	optionAfter             string
	// shared says whether a container created after the replacement gets the readers' host
	// mount (the config asks for the same mount) or a mount of its own (the config now asks
	// for other options: sharing would give it what the config no longer says).
	shared bool
}

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

	reader := readLoop("0.25")
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
