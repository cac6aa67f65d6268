//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// troubleshootConfig has a class per refusal docs/troubleshooting.md explains. DIR, KUBELET,
// EXPORT and SSHOPTS are replaced.
const troubleshootConfig = `kubeletRoot: KUBELET
stateDir: DIR/state
createBudget: 1500ms
subPathCopies: {podBytes: 4Ki}
runtimeClasses:
  mk-ts-ok:
    mounts:
      - {source: DIR/src/ok, destination: /ok, readOnly: true}
  mk-ts-missing:
    mounts:
      - {source: DIR/src/missing, destination: /missing, readOnly: true}
  mk-ts-private:
    mounts:
      - {source: DIR/src/private/dir, destination: /private, propagation: HostToContainer}
  mk-ts-nfs:
    mounts:
      - {type: nfs, source: "127.0.0.1:/export", destination: /nfs, options: [vers=4.1]}
  mk-ts-s3fs:
    mounts:
      - {type: fuse.s3fs, source: "mk-bucket", destination: /s3}
  mk-ts-dead:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, options: [SSHOPTS]}
`

// troubleshootCase is a pod and the event (or plugin log line) it must produce.
type troubleshootCase struct {
	pod, class string
	want       string // a part of the event's message
}

// TestTroubleshootingEvents produces, on a real kubelet and containerd with the runtime
// configured by `mountkeeper runtime configure`, every refusal and fallback an operator meets,
// and logs each as `kubectl describe pod` shows it in Events (type, reason, source, message)
// or, for a subPath fallback, as the agent logs it: docs/troubleshooting.md quotes these lines,
// and test/docs checks the quotes against the code's format strings. Each must appear:
// a class pod before the plugin ever ran (no guard key yet), a handler the runtime does not
// have yet (containerd not restarted), a missing source, a private host mount under
// HostToContainer, NFS on a node without mount.nfs and s3fs without its program (each names
// its packages), an sshfs server that is down, a class pod
// while the plugin is stopped; and a configMap subPath over the pod's copy budget, which starts
// with kubelet's bind (never worse) and logs the fallback.
func TestTroubleshootingEvents(t *testing.T) {
	testenv.Require(t, sshfsNeeds...)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	n := newKubeNodeWith(t, ctx, harness.KubeOptions{
		FeatureGates:              map[string]bool{"KubeletCrashLoopBackOffMax": true},
		MaxContainerRestartPeriod: time.Second,
	}, nil)
	if err := os.MkdirAll(filepath.Join(n.dir, "src", "ok"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := harness.MountTmpfs(filepath.Join(n.dir, "src", "private"), "private"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(n.dir, "src", "private", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	sshd := startHelloSSHD(t, harness.WorkDir(t, "mk-tssshd-"))
	sshd.Stop() // the server is down
	config := strings.NewReplacer("DIR", n.dir, "KUBELET", n.kube.RootDir(), "EXPORT", sshd.Export(),
		"SSHOPTS", strings.Join(sshd.ClientOptions(), ", ")).Replace(troubleshootConfig)
	n.scopes.add(t, []byte(config))
	configPath := filepath.Join(n.dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	classes := []string{"mk-ts-ok", "mk-ts-missing", "mk-ts-private", "mk-ts-nfs", "mk-ts-s3fs", "mk-ts-dead", "mk-ts-unconfigured"}
	for _, c := range classes {
		if err := n.api.CreateRuntimeClass(ctx, c, c); err != nil {
			t.Fatal(err)
		}
	}
	// What the chart's init container does: a handler per class, then a containerd restart.
	wrapper, err := harness.BuildRuntimeWrapper(n.dir)
	if err != nil {
		t.Fatal(err)
	}
	configure := exec.Command(n.bin, "runtime", "configure", "--runtime", "containerd", "--config", configPath,
		"--config-file", n.ctrd.ConfigPath(), "--drop-in", filepath.Join(n.dir, "containerd-conf.d", "99-mountkeeper.toml"),
		"--install-dir", filepath.Join(n.dir, "install"), "--runtime-binary", wrapper)
	if out, err := configure.CombinedOutput(); err != nil {
		t.Fatalf("runtime configure: %v\n%s", err, out)
	}
	if err := n.ctrd.Restart(ctx); err != nil {
		t.Fatal(err)
	}

	running := func(pod string) { (&deployNode{kubeNode: n}).waitRunning(t, pod, 60*time.Second) }
	seen := map[string]string{}
	expectEvent := func(c troubleshootCase) {
		t.Helper()
		p := n.podManifest(podSpec{name: c.pod, runtimeClass: c.class, script: "exec sleep 3600"})
		if _, err := n.api.CreatePod(ctx, "default", p); err != nil {
			t.Fatal(err)
		}
		err := harnessPoll(ctx, 60*time.Second, func() error {
			evs, err := n.api.Events(ctx, "default", c.pod)
			if err != nil {
				return err
			}
			for _, e := range evs {
				if strings.Contains(e.Message, c.want) {
					// As `kubectl describe pod` lists it: Type, Reason, From, Message.
					seen[c.pod] = e.Type + "  " + e.Reason + "  kubelet  " + e.Message
					return nil
				}
			}
			return errors.New("no such event yet")
		})
		if err != nil {
			var all []string
			evs, _ := n.api.Events(ctx, "default", c.pod)
			for _, e := range evs {
				all = append(all, e.Type+" "+e.Reason+" "+e.Message)
			}
			t.Errorf("pod %s (class %s): no event with %q: %v; its events:\n%s", c.pod, c.class, c.want, err, strings.Join(all, "\n"))
			return
		}
		t.Logf("kubectl describe pod %s, Events:\n  %s", c.pod, seen[c.pod])
	}

	// No plugin has run on this node yet: the guard has no key.
	expectEvent(troubleshootCase{"ts-before-first-start", "mk-ts-ok", "has not handled any container on this node yet"})
	expectEvent(troubleshootCase{"ts-unconfigured", "mk-ts-unconfigured", "mk-ts-unconfigured"})

	plugin, err := harness.StartPlugin(ctx, harness.PluginOptions{Binary: n.bin, Config: configPath, Socket: n.ctrd.NRISocket(), Log: testWriter{t, "mountkeeper"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Stop)
	// The pod refused before the plugin's first start now starts, with its mount.
	running("ts-before-first-start")
	for _, c := range []troubleshootCase{
		{"ts-missing", "mk-ts-missing", "does not exist on the host"},
		{"ts-private", "mk-ts-private", "is private, but rslave (HostToContainer) needs it shared or slave"},
		{"ts-dead", "mk-ts-dead", "not ready"},
	} {
		expectEvent(c)
	}
	// A missing mount helper and a missing FUSE program, each named with its packages; on a
	// machine that has one, that refusal cannot happen (said, not skipped silently).
	for _, c := range []struct {
		troubleshootCase
		program string
	}{
		{troubleshootCase{"ts-nfs", "mk-ts-nfs", "install nfs-common (Debian/Ubuntu) or nfs-utils (RHEL/Fedora)"}, "/sbin/mount.nfs"},
		{troubleshootCase{"ts-s3fs", "mk-ts-s3fs", "install s3fs (Debian/Ubuntu) or s3fs-fuse (RHEL/Fedora)"}, "s3fs"},
	} {
		if p, err := exec.LookPath(c.program); err == nil {
			t.Logf("%s is installed here (%s): pod %s would mount, not be refused; not produced", c.program, p, c.pod)
			continue
		}
		expectEvent(c.troubleshootCase)
	}

	// A configMap subPath over subPathCopies.podBytes (4Ki): kubelet's bind, and a warning.
	if err := n.api.CreateConfigMap(ctx, "default", "ts-big", map[string]string{"data": strings.Repeat("x", 8192)}); err != nil {
		t.Fatal(err)
	}
	p := n.podManifest(podSpec{name: "ts-subpath", script: "exec sleep 3600",
		volumes: []any{map[string]any{"name": "big", "configMap": map[string]any{"name": "ts-big"}}},
		mounts:  []any{map[string]any{"name": "big", "mountPath": "/big", "subPath": "data"}}})
	if _, err := n.api.CreatePod(ctx, "default", p); err != nil {
		t.Fatal(err)
	}
	running("ts-subpath")
	var fallback string
	for _, l := range strings.Split(plugin.Log(), "\n") {
		if strings.Contains(l, "it keeps kubelet's bind (over_budget)") {
			fallback = l
		}
	}
	if fallback == "" {
		t.Errorf("no subPath fallback logged for the over-budget copy:\n%s", plugin.Log())
	} else {
		t.Logf("the agent's log line for the subPath fallback:\n  %s", fallback)
	}

	plugin.Stop()
	expectEvent(troubleshootCase{"ts-plugin-stopped", "mk-ts-ok", "did not handle this container"})
}
