//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// deployConfig is the ConfigMap's config in TestKubeDeploy: a class with the three
// propagations and an sshfs class. DIR, KUBELET, EXPORT and SSHOPTS are replaced.
const deployConfig = `kubeletRoot: KUBELET
stateDir: DIR/state
unmountGrace: 2s
runtimeClasses:
  mk-kube:
    mounts:
      - {source: DIR/src/host/private, destination: /vol/private, propagation: None}
      - {source: DIR/src/host/slave, destination: /vol/slave, propagation: HostToContainer}
      - {source: DIR/src/host/shared, destination: /vol/shared, propagation: Bidirectional}
  mk-sshfs:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [SSHOPTS]}
`

// TestKubeDeploy installs mountkeeper on a real node (kubelet v1.34.4, containerd 2.4.2) from
// what ships: `make image`'s image imported into containerd, the manifests of deploy/ applied
// to the API server. There is no controller manager here, so the DaemonSet is stored but no
// controller makes its pod: the test creates a Pod from the DaemonSet's own pod template
// (with nodeName), as the DaemonSet controller would. The template's node paths are pointed at
// the test's node (containerd's config, the NRI socket, the hook and base spec directories),
// and --host-namespaces-pid at the test process: PID 1 of this machine is a sandbox process
// whose namespaces cannot be opened, and the test's namespaces are the node's here.
func TestKubeDeploy(t *testing.T) {
	testenv.Require(t, sshfsNeeds...)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	n := &deployNode{kubeNode: newKubeNodeWith(t, ctx, harness.KubeOptions{
		// A refused start (the guard) is retried every second, not after 10s, 20s, 40s...
		FeatureGates:              map[string]bool{"KubeletCrashLoopBackOffMax": true},
		MaxContainerRestartPeriod: time.Second,
	}, []string{"mk-kube", "mk-sshfs"})}
	n.readManifests()
	n.installImage()

	// The class sources: a shared tmpfs (Bidirectional and HostToContainer need it shared).
	host := filepath.Join(n.dir, "src", "host")
	if err := harness.MountTmpfs(host, "shared"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"private", "slave", "shared"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.sshd = startHelloSSHD(t, harness.WorkDir(t, "mk-kdsshd-"))
	sshOpts := strings.Join(n.sshd.ClientOptions(), ", ")
	config := strings.NewReplacer("DIR", n.dir, "KUBELET", n.kube.RootDir(), "EXPORT", n.sshd.Export(), "SSHOPTS", sshOpts).Replace(deployConfig)
	n.scopes.add(t, []byte(config))

	var plugin string
	t.Run("1 the shipped manifests install the plugin pod", func(t *testing.T) {
		n.apply(config)
		plugin = n.startPluginPod(t)
		// The init container ran `runtime configure`: containerd's config imports the drop-in,
		// which has a handler per class running the class's link to mountkeeper-runtime, the
		// wrapper is on the node. containerd reads it at its next start.
		cfg, err := os.ReadFile(n.ctrd.ConfigPath())
		if err != nil {
			t.Fatal(err)
		}
		dropIn, err := os.ReadFile(filepath.Join(filepath.Dir(n.ctrd.ConfigPath()), "conf.d", "99-mountkeeper.toml"))
		if err != nil || !strings.Contains(string(cfg), "imports = ['conf.d/99-mountkeeper.toml']") {
			t.Errorf("containerd's config does not import the drop-in (%v):\n%s", err, cfg)
		}
		for _, class := range []string{"mk-kube", "mk-sshfs"} {
			if !strings.Contains(string(dropIn), filepath.Join(n.dir, "hookbin", "class", class)) {
				t.Errorf("the drop-in lacks the handler of %s after the init container:\n%s", class, dropIn)
			}
		}
		// The runtime wrapper is the lean binary the image holds beside mountkeeper.
		installed, err := os.ReadFile(filepath.Join(n.dir, "hookbin", "mountkeeper-runtime"))
		built, berr := os.ReadFile(n.runtime)
		if err != nil || berr != nil || !bytes.Equal(installed, built) {
			t.Errorf("the init container did not install mountkeeper-runtime (read: %v, %v; %d bytes, want the %d of mountkeeper-runtime)", err, berr, len(installed), len(built))
		}
		if log := n.podLog(plugin, "runtime-configure"); !strings.Contains(log, "restart needed: containerd reads its config only at start") {
			t.Errorf("init container log: %q, want it to have written containerd's config", log)
		}
		n.checkNodeListener(t, plugin)
		// The node-install step an operator does once (docs/install.md): restart containerd.
		if err := n.ctrd.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	var classPod string
	t.Run("2 a class pod gets its mounts, a pod of no class nothing", func(t *testing.T) {
		classPod = n.runPod(t, "class-a", "mk-kube", "exec sleep 3600", true, nil, nil)
		checkThreeWay(t, ctx, n.execer(classPod), host)
		plain := n.runPod(t, "plain-a", "", "exec sleep 3600", true, nil, nil)
		if out, _, _, _ := n.ctrd.CRI().Exec(ctx, plain, "cat", "/proc/self/mountinfo"); strings.Contains(out, "/vol/") || strings.Contains(out, "/data") {
			t.Errorf("a pod without runtimeClassName has class mounts:\n%s", out)
		}
	})

	reads := filepath.Join(n.dir, "reads")
	if err := os.MkdirAll(reads, 0o755); err != nil {
		t.Fatal(err)
	}
	readerVolumes := []any{map[string]any{"name": "reads", "hostPath": map[string]any{"path": reads, "type": "Directory"}}}
	readerMounts := []any{map[string]any{"name": "reads", "mountPath": "/reads"}}
	var reader string
	t.Run("4 sshfs: one host mount for two pods, kept and adopted across a plugin pod replacement", func(t *testing.T) {
		reader = n.runPod(t, "sshfs-reader", "mk-sshfs",
			`while true; do if cat /data/hello >/dev/null 2>&1; then echo ok; else echo FAIL; fi >> /reads/log; sleep 0.1; done`,
			false, readerVolumes, readerMounts)
		other := n.runPod(t, "sshfs-other", "mk-sshfs", "exec sleep 3600", false, nil, nil)
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, other, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
			t.Errorf("second sshfs pod reads %q (exit %d)", out, code)
		}
		mountPoint, daemon := n.sshfsMount(t)
		if c := fuseMountsAt(t, mountPoint); c != 1 {
			t.Errorf("%d sshfs mounts at %s for two pods, want 1", c, mountPoint)
		}
		pluginPID := n.pluginPID(t)
		pluginCg, daemonCg := cgroupOf(t, pluginPID), cgroupOf(t, daemon)
		t.Logf("plugin pod's process %d: cgroup2 %s; FUSE daemon %d: cgroup2 %s", pluginPID, pluginCg, daemon, daemonCg)
		if daemonCg == "" || strings.HasPrefix(daemonCg+"/", pluginCg+"/") {
			t.Errorf("FUSE daemon %d in cgroup %q, inside the plugin pod's %q", daemon, daemonCg, pluginCg)
		}

		v1 := cgroupV1Paths(t, daemon)
		t.Logf("FUSE daemon's cgroup v1 memberships: %s", v1)

		okBefore, failBefore := countLog(t, filepath.Join(reads, "log"))
		n.deletePluginPod(t, plugin)
		// On a hybrid host (v1 above lists the daemon's cgroup v1 groups; empty on a unified
		// one) the daemon, and the ssh it forked, must have left the pod's v1 groups too:
		// runc kills a hostPID container's processes by them.
		if !alive(daemon) {
			t.Fatalf("FUSE daemon %d died with the plugin pod (its v1 groups: %s)", daemon, v1)
		}
		time.Sleep(2 * time.Second) // the plugin is away; the reader goes on
		plugin = n.startPluginPod(t)
		time.Sleep(time.Second)
		okAfter, failAfter := countLog(t, filepath.Join(reads, "log"))
		t.Logf("reads while the plugin pod was replaced: %d ok, %d failed (before: %d ok, %d failed)",
			okAfter-okBefore, failAfter-failBefore, okBefore, failBefore)
		if failAfter > 0 || okAfter-okBefore < 20 {
			t.Errorf("reads across the plugin pod replacement: %d ok, %d failed in all", okAfter, failAfter)
		}
		if mp, d := n.sshfsMount(t); mp != mountPoint || d != daemon {
			t.Errorf("after the replacement: mount %s, daemon %d; want %s, %d (adopted)", mp, d, mountPoint, daemon)
		}
		if c := fuseMountsAt(t, mountPoint); c != 1 {
			t.Errorf("%d sshfs mounts at %s after the replacement, want 1", c, mountPoint)
		}
		// The adoption is logged once the mount found at start-up has been probed, which runs
		// beside the connection to containerd that startPluginPod waited for: poll for it.
		if err := harnessPoll(ctx, 30*time.Second, func() error {
			if log := n.podLog(plugin, "mountkeeper"); !strings.Contains(log, "adopt") {
				return fmt.Errorf("the new plugin pod did not log an adoption within 30s:\n%s", log)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
		if log := n.podLog(plugin, "runtime-configure"); !strings.Contains(log, "nothing to change") {
			t.Errorf("the second init container changed containerd's config: %q", log)
		}
		third := n.runPod(t, "sshfs-third", "mk-sshfs", "exec sleep 3600", false, nil, nil)
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, third, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
			t.Errorf("a pod after the replacement reads %q (exit %d)", out, code)
		}
	})

	t.Run("guard: a class pod waits while the plugin pod is away", func(t *testing.T) {
		n.deletePluginPod(t, plugin)
		pod := n.podManifest(podSpec{name: "guarded", runtimeClass: "mk-kube", script: "exec sleep 3600"})
		// Privileged: the class has an rshared (Bidirectional) mount.
		pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["securityContext"] = map[string]any{"privileged": true}
		if _, err := n.api.CreatePod(ctx, "default", pod); err != nil {
			t.Fatal(err)
		}
		want := "did not handle this container"
		var seen string
		ranEarly := false
		err := harnessPoll(ctx, 60*time.Second, func() error {
			p, err := n.api.GetPod(ctx, "default", "guarded")
			if err != nil {
				return err
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running != nil {
					ranEarly = true
					return nil
				}
			}
			text := statusText(p) + n.eventsText("default", "guarded")
			if i := strings.Index(text, want); i >= 0 {
				seen = text[max(0, strings.LastIndex(text[:i], "mountkeeper:")):min(len(text), i+200)]
				return nil
			}
			return errors.New("no refusal yet")
		})
		if ranEarly {
			t.Fatal("a class pod runs while the plugin pod is away: without its mounts")
		}
		if err != nil {
			t.Fatalf("class pod while the plugin pod is away: %v", err)
		}
		t.Logf("refusal seen by the user: %s", seen)
		plugin = n.startPluginPod(t) // its own pod runs on the default handler, unguarded
		id := n.waitRunning(t, "guarded", 60*time.Second)
		if out, _, _, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/proc/self/mountinfo"); mountIn(t, out, "/vol/shared") == nil {
			t.Errorf("the class pod started after the plugin came back lacks its mounts:\n%s", out)
		}
	})

	t.Run("5 kubelet and containerd restarts keep the mounts; the next pods work", func(t *testing.T) {
		check := func(when string) {
			t.Helper()
			if out, _, _, _ := n.ctrd.CRI().Exec(ctx, classPod, "cat", "/proc/self/mountinfo"); mountIn(t, out, "/vol/slave") == nil {
				t.Errorf("%s: the running class pod lost /vol/slave", when)
			}
			if out, _, code, _ := n.ctrd.CRI().Exec(ctx, reader, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
				t.Errorf("%s: the running sshfs pod reads %q (exit %d)", when, out, code)
			}
		}
		start := time.Now()
		if err := n.kube.RestartKubelet(ctx); err != nil {
			t.Fatalf("restart kubelet: %v", err)
		}
		t.Logf("kubelet restarted in %v", time.Since(start).Round(time.Millisecond))
		check("after the kubelet restart")
		n.runPod(t, "after-kubelet", "mk-kube", "exec sleep 3600", true, nil, nil)

		start = time.Now()
		if err := n.ctrd.Restart(ctx); err != nil {
			t.Fatalf("restart containerd: %v", err)
		}
		t.Logf("containerd restarted in %v", time.Since(start).Round(time.Millisecond))
		check("after the containerd restart")
		id := n.runPod(t, "after-containerd", "mk-sshfs", "exec sleep 3600", false, nil, nil)
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
			t.Errorf("an sshfs pod after the containerd restart reads %q (exit %d)", out, code)
		}
		_, fails := countLog(t, filepath.Join(reads, "log"))
		if fails > 0 {
			t.Errorf("the sshfs reader saw %d failed reads in all", fails)
		}
	})
}
