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

	"github.com/mountkeeper/mountkeeper/test/harness"
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

// countReads returns how many reads the reader container logged as ok and as failed.
func countReads(t *testing.T, n *node, id string) (ok, fails int) {
	t.Helper()
	out, _ := n.sh(id, "cat /tmp/reads")
	return strings.Count(out, "ok"), strings.Count(out, "FAIL")
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
