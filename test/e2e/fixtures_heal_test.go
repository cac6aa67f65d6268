//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

const healConfig = `
stateDir: SRC/state
unmountGrace: 2s
probeInterval: 500ms
runtimeClasses:
  mk-heal:
    mounts:
      - {type: TYPE, source: "SOURCE", destination: /data, propagation: HostToContainer, options: [OPTS]}
  mk-private:
    mounts:
      - {type: TYPE, source: "SOURCE", destination: /data, propagation: None, options: [OPTS]}
`

func testHeal(t *testing.T, work string, srv healServer) {
	cfg := strings.NewReplacer("TYPE", srv.typ, "SOURCE", srv.source, "OPTS", srv.opts).Replace(healConfig)
	plugCg, err := harness.NewCgroup2(filepath.Base(work) + "-plugin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plugCg.Remove() })
	n := newNodeWith(t, harness.KindContainerd, []string{"mk-heal", "mk-private"}, cfg, plugCg.Dir)
	spec := *n.endNetworkScopes().RuntimeClasses["mk-heal"].Mounts[0].Network
	hostPath := netmount.HostPath(filepath.Join(n.src(), "state"), spec)
	reader := readLoop("0.1")
	r1 := n.mustRun("mk-heal", "r1", reader)
	r2 := n.mustRun("mk-heal", "r2", nil)
	p1 := n.mustRun("mk-private", "p1", nil)
	readsOK := func(id string) bool {
		out, code := n.sh(id, "cat /data/hello 2>&1")
		return code == 0 && out == srv.content
	}
	oneMount := func(what string) {
		t.Helper()
		if got := fuseMountsAt(t, hostPath); got != 1 {
			t.Errorf("%s: %d mounts at %s, want 1", what, got, hostPath)
		}
	}
	for _, id := range []string{r1, r2, p1} {
		if !readsOK(id) {
			t.Fatalf("container %s does not read the export", id[:12])
		}
	}
	oneMount("three containers of two classes")

	if srv.typ == "glusterfs" {
		t.Run("agent cgroup kill and adoption", func(t *testing.T) {
			before, _ := countReads(t, n, r1)
			if err := plugCg.Kill(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
			if ok, fails := countReads(t, n, r1); fails > 0 || ok < before+5 {
				t.Errorf("reads after the agent's cgroup kill: %d ok (from %d), %d failed", ok, before, fails)
			}
			n.startPluginIn(plugCg.Dir)
			r3 := n.mustRun("mk-heal", "r3", nil)
			if !readsOK(r3) {
				t.Error("a container made after the restart does not read the export")
			}
			oneMount("after the restart")
			if !strings.Contains(n.plugin.Log(), "adopt") {
				t.Error("the restarted plugin did not log an adoption")
			}
		})
	}

	scope := func() string {
		root, err := harness.Cgroup2Root()
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(root, "mountkeeper.slice", "mount-"+spec.Key())
	}()
	var times []time.Duration
	for i := 1; i <= 5; i++ {
		pids := daemonPids(t, scope, srv.daemon)
		if len(pids) != 1 {
			t.Fatalf("kill %d: FUSE daemons in %s: %v, want one", i, scope, pids)
		}
		okBefore, failBefore := countReads(t, n, r1)
		recoveredBefore := strings.Count(n.plugin.Log(), healRecovered)
		killed := time.Now()
		syscall.Kill(pids[0], syscall.SIGKILL)
		for !readsOK(r1) {
			if time.Since(killed) > healBound {
				t.Fatalf("kill %d: the container does not read the export %s after the kill\n%s", i, healBound, tail(n.plugin.Log(), 3000))
			}
			time.Sleep(50 * time.Millisecond)
		}
		took := time.Since(killed)
		times = append(times, took)
		waitRecovered(t, n, recoveredBefore, "kill "+strconv.Itoa(i))
		ok, fails := countReads(t, n, r1)
		t.Logf("kill %d: the reader reads again %s after SIGKILL of pid %d (reads in between: %d failed, %d ok)",
			i, took.Round(time.Millisecond), pids[0], fails-failBefore, ok-okBefore)
		oneMount("kill " + strconv.Itoa(i))
	}
	t.Logf("%s recovery times after SIGKILL of the daemon: %v", srv.typ, times)
	if !readsOK(r2) {
		t.Error("the second rslave container does not read after the kills")
	}
	if readsOK(p1) {
		t.Error("the rprivate container reads after the kills: it should keep the dead mount")
	}
	if !strings.Contains(n.plugin.Log(), "cannot be healed in place") {
		t.Error("the plugin did not log that the rprivate container cannot be healed in place")
	}
	if r4 := n.mustRun("mk-heal", "r4", nil); !readsOK(r4) {
		t.Error("a container made after the kills does not read the export")
	}
	oneMount("after 5 kills")
	if staged, _ := os.ReadDir(filepath.Join(n.src(), "state", "staging")); len(staged) != 0 {
		t.Errorf("staging directory not empty after 5 kills: %d entries", len(staged))
	}
	if got := countMountsBelow(t, filepath.Join(n.src(), "state")); got > 3 {
		t.Errorf("%d mounts below the state directory after 5 kills (mounts/, staging/, the mount)", got)
	}

	t.Run("server down for a while", func(t *testing.T) {
		srv.down(t)
		deadline := time.Now().Add(healBound)
		for readsOK(r1) {
			if time.Now().After(deadline) {
				t.Fatal("the container still reads with the server down")
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(4 * time.Second)
		if readsOK(r1) {
			t.Fatal("the container reads with the server down")
		}
		_, failBefore := countReads(t, n, r1)
		recoveredBefore := strings.Count(n.plugin.Log(), healRecovered)
		srv.up(t)
		back := time.Now()
		for !readsOK(r1) {
			if time.Since(back) > healBound {
				t.Fatalf("the container does not read %s after the server is back\n%s", healBound, tail(n.plugin.Log(), 3000))
			}
			time.Sleep(50 * time.Millisecond)
		}
		took := time.Since(back)
		_, fails := countReads(t, n, r1)
		t.Logf("%s: the reader reads again %s after the server is back (%d reads failed from then)", srv.typ, took.Round(time.Millisecond), fails-failBefore)
		waitRecovered(t, n, recoveredBefore, "after the server came back")
		oneMount("after the server came back")
		if !strings.Contains(n.plugin.Log(), "recovery attempt failed") {
			t.Error("no failed recovery attempt logged while the server was down")
		}
	})
}
