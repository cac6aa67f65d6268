//go:build e2e && guestnfs

package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// These tests mount NFS for real through the whole NRI path: real containerd and runc, the
// mountkeeper plugin binary, mount.nfs and the kernel's NFS client, against the kernel nfsd of
// test/vm's NFS guest (TestNFS). The host never compiles them (build tag guestnfs).

// TestGuestNFS: pods of an NFSv4.2 and an NFSv3 class read the guest's export through one host
// mount per class; the plugin, SIGKILLed while they read, is restarted, adopts both mounts
// and serves new containers; rpc.statd runs in a scope of its own throughout; once the last
// pod is gone and the grace has passed, nothing is mounted and no scope is left.
func TestGuestNFS(t *testing.T) {
	scopes := inGuestNFS(t)
	testsupport.InstallNFSClient(t, os.Getenv(guestNFSRootEnv)) // if TestGuestNFSDeadServer did not

	plugCg, err := harness.NewCgroup2("mk-guestnfs-plugin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plugCg.Remove() })
	classes := []*nfsClass{{name: "mk-nfs4"}, {name: "mk-nfs3"}}
	n := newNodeOpts(t, harness.KindContainerd, harness.Options{Handlers: []string{"mk-nfs4", "mk-nfs3"},
		NRIRequestTimeout: guestNFSRequestTimeout}, guestNFSConfig, plugCg.Dir)
	n.startPlugin()
	cfg := n.endNetworkScopes()
	for _, c := range classes {
		c.hostPath = netmount.HostPath(filepath.Join(n.src(), "state"), *cfg.RuntimeClasses[c.name].Mounts[0].Network)
	}

	// Both classes' pods at once: the runtime serializes their NRI calls (and so the two
	// mounts), not the rest of their creation, which takes seconds per pod under TCG.
	start := time.Now()
	var pods []podOf
	for _, c := range classes {
		pods = append(pods, podOf{c.name, c.name + "-r1"}, podOf{c.name, c.name + "-r2"})
	}
	ids := n.mustRunPods(readLoop("0.2"), pods...)
	for i, c := range classes {
		c.readers = ids[2*i : 2*i+2]
	}
	t.Logf("4 pods of the 2 classes created and started in %s, the mounts included", time.Since(start).Round(time.Millisecond))
	logMountTimes(t, n.plugin.Log())

	for _, c := range classes {
		t.Run(c.name+": two pods read the export through one host mount", func(t *testing.T) {
			m := oneNFSMount(t, c.hostPath)
			if m == nil {
				t.FailNow()
			}
			c.mountID = m.ID
			for _, id := range c.readers {
				readsExport(t, n, id)
				if dev := devOf(n.mountinfoOf(id, "/data")); dev != devOf(m) {
					t.Errorf("container %.12s's /data is device %s, want the host mount's %s", id, dev, devOf(m))
				}
			}
			if left := scopesBesideStatd(t, scopes); len(left) > 0 {
				t.Errorf("scopes left while mounted: %v; a kernel mount's scope goes once mount.nfs has exited", left)
			}
		})
	}

	t.Run("rpc.statd runs in a scope of its own", func(t *testing.T) {
		pid := testsupport.StatdPid()
		if pid == 0 {
			t.Fatal("no rpc.statd runs with an NFSv3 mount")
		}
		checkStatdCgroup(t, pid, scopes, plugCg.Dir)
	})
	statd := testsupport.StatdPid()

	t.Run("SIGKILLed and restarted, the plugin adopts the mounts and serves a new container", func(t *testing.T) {
		before := map[string]int{}
		for _, c := range classes {
			for _, id := range c.readers {
				before[id], _ = readsOf(t, n, id)
			}
		}
		// Mount IDs are reused once free: a mount made anew in place of a detached one may get
		// the old one's ID. Held open, each host mount keeps its ID taken until the end.
		for _, c := range classes {
			f, err := os.Open(c.hostPath)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
		}
		killed := time.Now()
		if err := n.plugin.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testsupport.Eventually(t, 10*time.Second, 100*time.Millisecond, "the plugin's exit after SIGKILL", n.plugin.Exited)
		n.startPluginIn(plugCg.Dir)
		if err := n.plugin.WaitLog(n.ctx, adoptedLog, len(classes), 30*time.Second); err != nil {
			t.Errorf("the restarted plugin did not adopt both mounts: %v", err)
		} else {
			t.Logf("both mounts adopted %s after the SIGKILL", time.Since(killed).Round(time.Millisecond))
		}
		start := time.Now()
		id := n.mustRun(classes[0].name, classes[0].name+"-r3", nil)
		t.Logf("%s: a container of the restarted plugin in %s", classes[0].name, time.Since(start).Round(time.Millisecond))
		readsExport(t, n, id)
		for _, c := range classes {
			if m := oneNFSMount(t, c.hostPath); m != nil && m.ID != c.mountID {
				t.Errorf("%s: the host mount is mount %d after the restart, want %d (adopted, not mounted anew)", c.name, m.ID, c.mountID)
			}
		}
		for id, b := range before {
			ok, fails := readsOf(t, n, id)
			t.Logf("reader %.12s: %d reads ok from the SIGKILL to the new container, %d failed", id, ok-b, fails)
			if fails > 0 || ok <= b {
				t.Errorf("reader %.12s: %d reads ok (from %d), %d failed", id, ok, b, fails)
			}
		}
		if got := testsupport.StatdPid(); got != statd {
			t.Errorf("rpc.statd is %d after the plugin's restart, want %d still running", got, statd)
		}
	})

	t.Run("after the last pod and the grace nothing is mounted and no scope is left", func(t *testing.T) {
		n.removePods()
		removed := time.Now()
		for left := leftAfter(t, classes, scopes); left != ""; left = leftAfter(t, classes, scopes) {
			if time.Since(removed) > 40*time.Second {
				t.Fatalf("40s after the last pod's removal (grace 10s): %s", left)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("released %s after the last pod's removal (grace 10s)", time.Since(removed).Round(time.Millisecond))
		if got := testsupport.StatdPid(); got != statd {
			t.Errorf("rpc.statd is %d after the v3 mount's release, want %d still running", got, statd)
		}
	})
}
