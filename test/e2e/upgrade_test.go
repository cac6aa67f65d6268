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

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

const upgradeConfig = `
unmountGrace: 2s
createBudget: 1500ms
runtimeClasses:
  CLASS:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [OPTS]}
`

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

// TestNetworkUpgrade (issue 24 item 4), on real containerd + runc with sshd over loopback: two
// containers read an sshfs class mount every 100 ms; the agent holding it is replaced by the
// current one. Replacing the previous release's agent (built from this repository's history,
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

	reader := []string{"sh", "-c", "while true; do if cat /data/hello >/dev/null 2>&1; then echo ok; else echo FAIL; fi >> /tmp/reads; sleep 0.1; done"}
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
			eventually(t, 5*time.Second, "the adopted daemon dead", func() bool { return !alive(oldDaemon) })
			start := time.Now()
			eventually(t, healBound, "a reader reads through a healed mount", func() bool {
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
			eventually(t, 15*time.Second, "the readers' mount unmounted", func() bool {
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
		eventually(t, 15*time.Second, "every mount below the state dir unmounted", func() bool {
			return len(fuseMountsBelow(t, mountsDir)) == 0
		})
		eventually(t, 5*time.Second, "the first agent's daemon gone", func() bool { return !alive(oldDaemon) })

		eventually(t, 5*time.Second, "the mount scopes removed", func() bool {
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

// newContainerMount checks that a container created after the replacement reads the export
// through the readers' host mount (old) when the config still asks for it, else through a
// mount of its own.
func newContainerMount(t *testing.T, n *node, c upgradeCase, r3, mountsDir string, old hostMount) {
	if out, code := n.sh(r3, "cat /data/hello"); code != 0 || out != helloSSHFS {
		t.Errorf("new container reads %q (exit %d)", out, code)
	}
	dev := strings.Fields(n.mountinfoOf(r3, "/data"))[2]
	mounts := fuseMountsBelow(t, mountsDir)
	t.Logf("new container's /data: device %s; host mounts below the state dir: %v", dev, mounts)
	if c.shared && (dev != old.dev || len(mounts) != 1) {
		t.Errorf("new container's /data is device %s, %d host mounts; want the readers' %s and one mount", dev, len(mounts), old.dev)
	}
	if !c.shared && (dev == old.dev || len(mounts) != 2) {
		t.Errorf("new container's /data is device %s, %d host mounts; want a mount of the new options (not %s) beside the readers'", dev, len(mounts), old.dev)
	}
}

// startPluginBinary starts bin as the node's plugin (`mountkeeper nri` of that build).
func (n *node) startPluginBinary(bin string) {
	n.t.Helper()
	current := n.bin
	n.bin = bin
	n.startPlugin()
	n.bin = current
}

// hostMount is one line of this mount namespace's mountinfo.
type hostMount struct{ id, dev, point, fstype string }

// fuseMountsBelow returns the FUSE mounts directly below dir.
func fuseMountsBelow(t *testing.T, dir string) []hostMount {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []hostMount
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		sep := 0
		for i, v := range f {
			if v == "-" {
				sep = i
				break
			}
		}
		if sep == 0 || sep+1 >= len(f) {
			continue
		}
		m := hostMount{id: f[0], dev: f[2], point: f[4], fstype: f[sep+1]}
		if filepath.Dir(m.point) == dir && strings.HasPrefix(m.fstype, "fuse") {
			out = append(out, m)
		}
	}
	return out
}

func mountAt(t *testing.T, dir, point string) (hostMount, bool) {
	for _, m := range fuseMountsBelow(t, dir) {
		if m.point == point {
			return m, true
		}
	}
	return hostMount{}, false
}

// daemonOf is the pid of the FUSE daemon serving the mount at point: the process whose
// command line names it.
func daemonOf(t *testing.T, point string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		for _, arg := range strings.Split(string(cmdline), "\x00") {
			if arg == point {
				return pid
			}
		}
	}
	t.Fatalf("no process serves the mount at %s", point)
	return 0
}

// mountScopeExists says whether the cgroup scope of the mount of key is still there.
func mountScopeExists(t *testing.T, key string) bool {
	root, err := harness.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(filepath.Join(root, "mountkeeper.slice", "mount-"+key))
	return err == nil
}
