//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

func testUpgrade(t *testing.T, c upgradeCase) {
	work := harness.WorkDir(t, "mk-upg-")
	sshd := startHelloSSHD(t, work)
	config := func(class, extra string) string {
		if class == "" {
			return "unmountGrace: 2s\nruntimeClasses: {}\n"
		}
		opts := sshd.ClientOptions()
		if extra != "" {
			opts = append(opts, extra)
		}
		return strings.NewReplacer("CLASS", class, "EXPORT", sshd.Export(), "OPTS", strings.Join(opts, ", ")).Replace(upgradeConfig)
	}
	n := newNodeWithoutPlugin(t, harness.KindContainerd, []string{"mk-sshfs", "mk-sshfs-b"}, config(c.classBefore, ""), "")
	bin := n.bin
	if c.before != "" {
		var err error
		if bin, err = harness.BuildMountkeeperAt(c.before); err != nil {
			t.Fatal(err)
		}
	}
	n.endNetworkScopes()
	mountsDir := filepath.Join(n.src(), "state", "mounts")
	n.startPluginBinary(bin)

	reader := readLoop("0.1")
	r1 := n.mustRun(c.classBefore, "r1", reader)
	r2 := n.mustRun(c.classBefore, "r2", reader)
	held := fuseMountsBelow(t, mountsDir)
	if len(held) != 1 {
		t.Fatalf("the first agent holds %d sshfs mounts below %s, want 1: %v", len(held), mountsDir, held)
	}
	old := held[0]
	n.scopes.keys = append(n.scopes.keys, filepath.Base(old.point)) // ended with the test
	oldDaemon := daemonOf(t, old.point)
	t.Logf("the first agent's mount: mount ID %s, device %s, daemon pid %d, at %s", old.id, old.dev, oldDaemon, old.point)

	n.plugin.Stop()
	after := "stateDir: " + filepath.Join(n.src(), "state") + "\n" + config(c.classAfter, c.optionAfter)
	if err := os.WriteFile(n.config, []byte(after), 0o644); err != nil {
		t.Fatal(err)
	}
	n.endNetworkScopes() // the new config's mounts end with the test too
	n.startPlugin()
	time.Sleep(5 * time.Second) // past the grace period (2s), a Synchronize and a probe

	t.Run("the readers never fail and keep the same mount and daemon", func(t *testing.T) {
		for _, id := range []string{r1, r2} {
			ok, fails := countReads(t, n, id)
			t.Logf("reader %.12s: %d reads ok, %d failed", id, ok, fails)
			if fails > 0 || ok < 30 {
				t.Errorf("reader %.12s: %d reads ok, %d failed; want 0 failed (and at least 30 ok)", id, ok, fails)
			}
		}
		m, ok := mountAt(t, mountsDir, old.point)
		t.Logf("after the replacement: mount ID %s (present %v), daemon pid %d alive %v", m.id, ok, oldDaemon, alive(oldDaemon))
		if !ok || m.id != old.id {
			t.Errorf("the readers' host mount at %s: %+v (present %v), want mount ID %s", old.point, m, ok, old.id)
		}
		if !alive(oldDaemon) {
			t.Errorf("the first agent's FUSE daemon (pid %d) is gone", oldDaemon)
		}
		if log := n.plugin.Log(); strings.Contains(log, "unmounting an earlier agent's mount") {
			t.Errorf("the new agent unmounts the readers' mount:\n%s", log)
		}
	})

	var r3 string
	if c.classAfter != "" {
		r3 = n.mustRun(c.classAfter, "r3", nil)
		t.Run("a new container gets the mount the config asks for", func(t *testing.T) { newContainerMount(t, n, c, r3, mountsDir, old) })
	}
	if c.shared {
		// The adopted daemon is the new agent's like any: probed, and replaced in its own
		// scope when it dies (its scope is the one named after its old key).
		t.Run("the adopted mount is probed and healed", func(t *testing.T) {
			before, _ := countReads(t, n, r1)
			syscall.Kill(oldDaemon, syscall.SIGKILL)
			testsupport.Eventually(t, 5*time.Second, 100*time.Millisecond, "the adopted daemon dead", func() bool { return !alive(oldDaemon) })
			start := time.Now()
			testsupport.Eventually(t, healBound, 100*time.Millisecond, "a reader reads through a healed mount", func() bool {
				out, code := n.sh(r1, "cat /data/hello")
				return code == 0 && out == helloSSHFS
			})
			ok, fails := countReads(t, n, r1)
			t.Logf("healed %s after the kill; reader %.12s: %d more reads ok, %d failed while the daemon was dead",
				time.Since(start).Round(time.Millisecond), r1, ok-before, fails)
			// The reader reads as soon as the new mount is on top; the dead one beneath is
			// detached, and the recovery logged, just after: count the host mounts only then.
			waitRecovered(t, n, 0, "the adopted mount healed")
			if got := fuseMountsBelow(t, mountsDir); len(got) != 1 || got[0].point != old.point {
				t.Errorf("host mounts after the heal: %v, want one at %s", got, old.point)
			}
		})
	}

	cri := n.rt.CRI()
	remove := func(ids ...string) {
		for _, id := range ids {
			cri.StopContainer(n.ctx, id)
			if err := cri.RemoveContainer(n.ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	remove(r1, r2)
	if !c.shared && r3 != "" {
		t.Run("the readers' mount goes once they are gone; the new one stays", func(t *testing.T) {
			testsupport.Eventually(t, 15*time.Second, 100*time.Millisecond, "the readers' mount unmounted", func() bool {
				_, ok := mountAt(t, mountsDir, old.point)
				return !ok
			})
			if got := fuseMountsBelow(t, mountsDir); len(got) != 1 {
				t.Errorf("host mounts below the state dir: %v, want the new container's", got)
			}
		})
	}
	if r3 != "" {
		remove(r3)
	}
	t.Run("nothing is left once every container is gone", func(t *testing.T) {
		testsupport.Eventually(t, 15*time.Second, 100*time.Millisecond, "every mount below the state dir unmounted", func() bool {
			return len(fuseMountsBelow(t, mountsDir)) == 0
		})
		testsupport.Eventually(t, 5*time.Second, 100*time.Millisecond, "the first agent's daemon gone", func() bool { return !alive(oldDaemon) })

		testsupport.Eventually(t, 5*time.Second, 100*time.Millisecond, "the mount scopes removed", func() bool {
			for _, key := range n.scopes.keys {
				if mountScopeExists(t, key) {
					return false
				}
			}
			return true
		})
		if ents, _ := os.ReadDir(mountsDir); len(ents) != 0 {
			t.Errorf("left below %s: %v", mountsDir, ents)
		}
		if ents, _ := os.ReadDir(filepath.Join(n.src(), "state", "state")); len(ents) != 0 {
			t.Errorf("state files left: %v", ents)
		}
	})
}
