//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/nri"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

const reloadConfig = `
stateDir: STATE
mountTimeout: MOUNTTIMEOUT
unmountGrace: GRACE
probeInterval: PROBE
runtimeClasses:
  mk-reload:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [SSHOPTS]}
  mk-eager:
    networkMount: MODE
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT/eager", destination: /data, options: [SSHOPTS]}
  mk-hung:
    networkMount: MODE
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:/", destination: /data, options: [HUNGOPTS]}
`

// TestNetworkReload: a config reload (kubelet's ..data swap of a ConfigMap volume) changes how
// the running plugin runs its network mounts, on real containerd + runc + sshfs, not only
// which ones it asks for. Before it, every network setting is long (mountTimeout 30s,
// unmountGrace and probeInterval an hour) and two classes are on demand; the reload shortens
// them all and makes both classes eager. Then, with the same plugin: the eager class is
// mounted with no pod; the mount of a server that accepts and never answers fails after the
// new mountTimeout; a killed sshfs daemon is replaced under a running container at the new
// probeInterval; the mount of the removed container goes after the new unmountGrace. Each
// would take 30s or an hour with the settings before.
func TestNetworkReload(t *testing.T) {
	testenv.Require(t, sshfsNeeds...)
	work := harness.WorkDir(t, "mk-reload-")
	sshd := startHelloSSHD(t, work)
	if err := os.Mkdir(filepath.Join(sshd.Export(), "eager"), 0o755); err != nil {
		t.Fatal(err)
	}
	hung := startSilentServer(t)
	hungOpts := append([]string{fmt.Sprintf("port=%d", hung.port)}, sshd.ClientOptions()[1:]...)

	n := newNodeWithoutPlugin(t, harness.KindContainerd, []string{"mk-reload", "mk-eager", "mk-hung"}, "", "")
	stateDir := filepath.Join(n.src(), "state")
	config := func(mountTimeout, grace, probe, mode string) string {
		return strings.NewReplacer("STATE", stateDir, "MOUNTTIMEOUT", mountTimeout, "GRACE", grace, "PROBE", probe, "MODE", mode,
			"EXPORT", sshd.Export(), "SSHOPTS", strings.Join(sshd.ClientOptions(), ", "), "HUNGOPTS", strings.Join(hungOpts, ", ")).Replace(reloadConfig)
	}
	before := config("30s", "1h", "1h", "onDemand")
	cfg := n.scopes.add(t, []byte(before)) // the scopes of all three end with the test
	spec := func(class string) string { return cfg.RuntimeClasses[class].Mounts[0].Network.Key() }
	plugin := startConfigMapPlugin(t, n, before)
	mounts := func() map[string]nri.NetworkMount {
		t.Helper()
		byKey := make(map[string]nri.NetworkMount)
		for _, m := range plugin.status().NetworkMounts {
			byKey[m.Key] = m
		}
		return byKey
	}
	hostPath := netmount.HostPath(stateDir, *cfg.RuntimeClasses["mk-reload"].Mounts[0].Network)
	reads := func(id string) bool {
		out, code := n.sh(id, "cat /data/hello 2>&1")
		return code == 0 && out == helloSSHFS
	}

	var r1 string
	testsupport.Eventually(t, 20*time.Second, 100*time.Millisecond, "a container of mk-reload (the plugin registered)", func() bool {
		id, err := n.runContainer("mk-reload", "r1")
		r1 = id
		return err == nil
	})
	if !reads(r1) {
		t.Fatal("the container does not read the export")
	}
	if m := mounts(); len(m) != 1 {
		t.Fatalf("before the reload: mounts %v, want mk-reload's only (the others on demand)", m)
	}

	plugin.update(config("2s", "2s", "500ms", "eager"))

	t.Run("a class made eager is mounted with no pod", func(t *testing.T) {
		testsupport.Eventually(t, 20*time.Second, 100*time.Millisecond, "mk-eager's mount", func() bool { return mounts()[spec("mk-eager")].State == "mounted" })
	})
	t.Run("a mount attempt is bounded by the new mountTimeout", func(t *testing.T) {
		testsupport.Eventually(t, 20*time.Second, 100*time.Millisecond, "mk-hung's first attempt to fail", func() bool { return mounts()[spec("mk-hung")].LastError != "" })
		if got := mounts()[spec("mk-hung")].LastError; !strings.Contains(got, "did not finish within 2s") {
			t.Errorf("mk-hung's last error: %q, want the new mountTimeout's", got)
		}
	})
	t.Run("a dead mount is replaced at the new probeInterval", func(t *testing.T) {
		root, err := harness.Cgroup2Root()
		if err != nil {
			t.Fatal(err)
		}
		pids := daemonPids(t, filepath.Join(root, "mountkeeper.slice", "mount-"+spec("mk-reload")), func(comm string) bool { return comm != "ssh" })
		if len(pids) != 1 {
			t.Fatalf("sshfs daemons of mk-reload: %v, want one", pids)
		}
		syscall.Kill(pids[0], syscall.SIGKILL)
		testsupport.Eventually(t, healBound, 100*time.Millisecond, "the container to read again", func() bool { return reads(r1) })
		// The container reads as soon as the new mount is on top of the dead one; the heal
		// detaches the dead one, then counts the recovery and says mounted: wait for that
		// (mounted alone is also the state before the probe found the death).
		testsupport.Eventually(t, healBound, 100*time.Millisecond, "mk-reload mounted again", func() bool {
			m := mounts()[spec("mk-reload")]
			return m.State == "mounted" && m.Recoveries >= 1
		})
		if m := mounts()[spec("mk-reload")]; m.Deaths != 1 || m.Recoveries != 1 {
			t.Errorf("mk-reload: %d deaths, %d recoveries; want 1 and 1", m.Deaths, m.Recoveries)
		}
	})
	t.Run("an unused mount goes after the new unmountGrace", func(t *testing.T) {
		cri := n.rt.CRI()
		cri.StopContainer(n.ctx, r1)
		if err := cri.RemoveContainer(n.ctx, r1); err != nil {
			t.Fatal(err)
		}
		testsupport.Eventually(t, 15*time.Second, 100*time.Millisecond, "mk-reload's mount to go", func() bool { return fuseMountsAt(t, hostPath) == 0 })
	})
	if !strings.Contains(plugin.Log(), "config reloaded") {
		t.Error("the plugin did not log the reload")
	}
}
