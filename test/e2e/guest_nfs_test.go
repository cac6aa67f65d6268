//go:build e2e && guestnfs

package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// These tests mount NFS for real through the whole NRI path: real containerd and runc, the
// mountkeeper plugin binary, mount.nfs and the kernel's NFS client, against the kernel nfsd of
// test/vm's NFS guest (TestNFS), which runs them after internal/netmount's guest tests have
// installed the NFS client. The host never compiles them (build tag guestnfs).

// guestNFSRootEnv is set by the guest once its nfsd serves /export.
const guestNFSRootEnv = "MOUNTKEEPER_GUEST_NFS_ROOT"

// guestNFSContent is what the guest's export holds in its file "hello".
const guestNFSContent = "served by the guest's nfsd\n"

// guestNFSConfig mounts on demand, in CreateContainer: an NFSv4.2 mount takes 6-8 s under
// TCG, so the runtime's plugin request timeout (guestNFSRequestTimeout) and the create budget
// are raised to hold it. The grace keeps a mount made for a pod's sandbox until its
// containers come, seconds later under TCG (with 2 s the mount went first, once).
const guestNFSConfig = `
unmountGrace: 10s
createBudget: 25s
pluginRequestTimeout: 30s
runtimeClasses:
  mk-nfs4:
    mounts:
      - {type: nfs, source: "127.0.0.1:/", destination: /data, propagation: HostToContainer, options: [vers=4.2, hard]}
  mk-nfs3:
    mounts:
      - {type: nfs, source: "127.0.0.1:/export", destination: /data, propagation: HostToContainer, options: [vers=3, hard]}
`

const guestNFSRequestTimeout = 30 * time.Second

// nfsClass is one NFS class of guestNFSConfig with its readers.
type nfsClass struct {
	name     string
	hostPath string // the plugin's host mount of the class's export
	readers  []string
	mountID  int // the host mount's ID in mountinfo, once mounted
}

// TestGuestNFS: pods of an NFSv4.2 and an NFSv3 class read the guest's export through one host
// mount per class; the plugin, SIGKILLed while they read, is restarted, adopts both mounts
// and serves new containers; rpc.statd runs in a scope of its own throughout; once the last
// pod is gone and the grace has passed, nothing is mounted and no scope is left.
func TestGuestNFS(t *testing.T) {
	if os.Getenv(guestNFSRootEnv) == "" {
		t.Fatalf("%s is not set: this test runs in test/vm's NFS guest only", guestNFSRootEnv)
	}
	if _, err := os.Stat("/usr/sbin/mount.nfs"); err != nil {
		t.Fatalf("no NFS client (internal/netmount's TestNFSGuestNoClient installs it before this runs): %v", err)
	}
	stopStatd(t)
	cgRoot, err := harness.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	scopes := filepath.Join(cgRoot, netmount.DefaultCgroupParent)
	// The node's rpc.statd outlives every mount by design; it goes with the test.
	t.Cleanup(func() {
		if err := (&harness.Cgroup2{Dir: filepath.Join(scopes, "rpc-statd")}).Remove(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		os.Remove(scopes)
	})

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

// leftAfter says what is left of the classes' mounts: mounts at their host paths and scopes
// beside rpc.statd's; "" when nothing is.
func leftAfter(t *testing.T, classes []*nfsClass, scopes string) string {
	t.Helper()
	var left []string
	for _, c := range classes {
		if ms := mountsAt(t, c.hostPath); len(ms) > 0 {
			left = append(left, "mounted: "+mountLines(ms))
		}
	}
	if s := scopesBesideStatd(t, scopes); len(s) > 0 {
		left = append(left, fmt.Sprintf("scopes: %v", s))
	}
	return strings.Join(left, "; ")
}

// adoptedLog is what the plugin logs for each mount of an earlier agent it takes over.
const adoptedLog = "netmount: adopted the mount found at start-up"

// logMountTimes logs the plugin's mount times ("netmount: mounted", with took=).
func logMountTimes(t *testing.T, log string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "netmount: mounted") {
			t.Logf("plugin: %s", line)
		}
	}
}

// readsOf counts the ok and failed reads a readLoop container logged.
func readsOf(t *testing.T, n *node, id string) (ok, fails int) {
	t.Helper()
	log, err := n.fileIn(id, "/tmp/reads")
	if err != nil && !errors.Is(err, fs.ErrNotExist) { // none yet
		t.Fatal(err)
	}
	return tallyReads(log)
}

// stopStatd kills an rpc.statd an earlier test left, so that the plugin's NFSv3 mount starts
// the node's own.
func stopStatd(t *testing.T) {
	t.Helper()
	if pid := testsupport.StatdPid(); pid != 0 {
		t.Logf("killing the rpc.statd (%d) an earlier test left", pid)
		syscall.Kill(pid, syscall.SIGKILL)
		testsupport.Eventually(t, 10*time.Second, 50*time.Millisecond, "rpc.statd's exit", func() bool { return testsupport.StatdPid() == 0 })
	}
}

// checkStatdCgroup checks that rpc.statd (pid) runs in the node's statd scope below scopes:
// neither in the plugin's cgroup nor in a mount's scope, which die with the plugin or the mount.
func checkStatdCgroup(t *testing.T, pid int, scopes, pluginCgroup string) {
	t.Helper()
	cg, err := testsupport.CgroupV2(pid)
	if err != nil {
		t.Fatal(err)
	}
	root := strings.TrimSuffix(scopes, "/"+netmount.DefaultCgroupParent)
	if want := "/" + netmount.DefaultCgroupParent + "/rpc-statd"; cg != want {
		t.Errorf("rpc.statd (%d) runs in cgroup %s, want %s (the plugin's is %s)", pid, cg, want, strings.TrimPrefix(pluginCgroup, root))
	}
}

// scopesBesideStatd lists the cgroups below scopes other than rpc.statd's.
func scopesBesideStatd(t *testing.T, scopes string) []string {
	t.Helper()
	entries, err := os.ReadDir(scopes)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "rpc-statd" {
			left = append(left, e.Name())
		}
	}
	return left
}

// mountsAt returns the host's mounts at path.
func mountsAt(t *testing.T, path string) []*mountinfo.Info {
	t.Helper()
	ms, err := testsupport.MountsAt(path)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// oneNFSMount returns the one NFS mount at path; unless there is exactly one, it fails the
// test and returns nil.
func oneNFSMount(t *testing.T, path string) *mountinfo.Info {
	t.Helper()
	ms := mountsAt(t, path)
	if len(ms) != 1 || !slices.Contains([]string{"nfs", "nfs4"}, ms[0].FSType) {
		t.Errorf("mounts at %s:\n%s\nwant one NFS mount", path, mountLines(ms))
		return nil
	}
	return ms[0]
}

// readsExport checks that container id reads the guest's export at /data.
func readsExport(t *testing.T, n *node, id string) {
	t.Helper()
	if got, err := n.fileIn(id, "/data/hello"); err != nil || got != guestNFSContent {
		t.Errorf("container %.12s reads %q (%v), want %q", id, got, err, guestNFSContent)
	}
}
