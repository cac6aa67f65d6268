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

// What TestGuestNFS shares: its node's configuration, its classes and the checks it runs on
// the guest's mounts, scopes and rpc.statd.

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

// inGuestNFS checks that the test runs in test/vm's NFS guest, stops an rpc.statd an earlier
// test left (so that the test's first NFSv3 mount starts the node's own), and returns the
// cgroup directory of mountkeeper's scopes. The node's rpc.statd outlives every mount by
// design; its scope goes with the test.
func inGuestNFS(t *testing.T) (scopes string) {
	t.Helper()
	if os.Getenv(guestNFSRootEnv) == "" {
		t.Fatalf("%s is not set: this test runs in test/vm's NFS guest only", guestNFSRootEnv)
	}
	stopStatd(t)
	cgRoot, err := harness.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	scopes = filepath.Join(cgRoot, netmount.DefaultCgroupParent)
	t.Cleanup(func() {
		if err := (&harness.Cgroup2{Dir: filepath.Join(scopes, "rpc-statd")}).Remove(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		os.Remove(scopes)
	})
	return scopes
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
