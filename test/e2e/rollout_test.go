//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// rolloutMidScript is the command of the class pod created while the agent pod is replaced:
// it writes what it found at its own start (its class mount there or not) to /reads, then
// sleeps. A container that started without its mount says so itself, whatever happens later.
const rolloutMidScript = `if grep -q " /data .* - fuse.sshfs " /proc/self/mountinfo && cat /data/hello >/dev/null; then echo mounted; else echo NO-MOUNT; fi > /reads/$POD; exec sleep 3600`

// TestHelmRollout (issue 26 item 1): a real rolling update of the chart's DaemonSet by the
// real kube-controller-manager (DaemonSet controller) and kube-scheduler on the real kubelet
// and containerd, under a pod reading an sshfs class mount every 100 ms. The chart is
// installed with image A (this tree, version stamp e2e-a), `helm upgrade` names image B (the
// same tree stamped e2e-b), then `helm rollback` goes back to A. Each time the DaemonSet
// controller replaces the agent pod (maxUnavailable as the chart sets it: 1) and the test
// checks that the reader saw no failed read, that the new agent (its log names its version)
// adopted the same host mount (mount ID) served by the same FUSE daemon (PID), and that a
// class pod created while the old agent pod was going away was either refused by the guard
// (kubelet retrying until the new agent is up) or got its mount: it never started without it
// (the pod records what it found at its own start). It logs the rollout time, the reads, and
// how long the mid-rollout pod waited. Nothing is pulled: both images are built and imported.
//
// subPaths through the rollout: two pods read a configMap key mounted with subPath (a file)
// and a directory of a configMap volume mounted with subPath, every 10 ms (livereader): one in
// class mk-live (subPathUpdates: live), one of no class (kubelet's subPath, mountkeeper's
// private copy). Once the old agent's process is gone the configMap is patched (kubelet
// nudged to write it at once) and the test waits until kubelet swapped the volumes; after the
// rollout it is patched again. Every read must be whole and of one version, the readers never
// restart, the live pod's subPath mounts are the ones it had until the new agent applies the
// missed update, which it must read, then the later one too (60 s each); the other pod's
// mounts stay untouched and it reads only its first value. Logged: reads, when the gap's swap
// happened against the new agent's connection, and how long after that connection the
// container read it. At the end the other pod's container is restarted after four updates
// (its kubelet bind is stale, kubernetes #68211): it must start and read the newest value.
//
// hostNamespacesPID names the test process: PID 1 of this machine is a sandbox process whose
// namespaces cannot be opened. The uninstall hooks are off: TestHelmUninstall tests them, and
// this node has no service proxy for their waiter.
func TestHelmRollout(t *testing.T) {
	helmBin := pinnedHelm()
	testenv.Require(t, append([]string{helmBin}, sshfsNeeds...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := &deployNode{kubeNode: newKubeNodeWith(t, ctx, harness.KubeOptions{
		ControlPlane: true,
		// A refused start (the guard) is retried every second, not after 10s, 20s, 40s...
		FeatureGates:              map[string]bool{"KubeletCrashLoopBackOffMax": true},
		MaxContainerRestartPeriod: time.Second,
	}, []string{"mk-sshfs", "mk-live"})}
	// The chart owns the classes' RuntimeClasses.
	for _, class := range []string{"mk-sshfs", "mk-live"} {
		if err := n.api.DeleteRuntimeClass(ctx, class); err != nil {
			t.Fatal(err)
		}
	}
	n.sshd = startHelloSSHD(t, harness.WorkDir(t, "mk-rosshd-"))
	reads := filepath.Join(n.dir, "reads")
	if err := os.MkdirAll(reads, 0o755); err != nil {
		t.Fatal(err)
	}

	// Images A and B: two builds of this tree with two version stamps, imported, not pulled.
	for _, tag := range []string{"e2e-a", "e2e-b"} {
		n.importVersionImage(t, tag)
	}

	classMount := map[string]any{
		"type": "fuse.sshfs", "source": "root@127.0.0.1:" + n.sshd.Export(), "destination": "/data",
		"propagation": "HostToContainer", "options": n.sshd.ClientOptions(),
	}
	config := map[string]any{"kubeletRoot": n.kube.RootDir(), "stateDir": filepath.Join(n.dir, "state"), "unmountGrace": "2s"}
	configText, _ := json.Marshal(map[string]any{"kubeletRoot": config["kubeletRoot"], "stateDir": config["stateDir"],
		"runtimeClasses": map[string]any{"mk-sshfs": map[string]any{"mounts": []any{classMount}}}})
	n.scopes.add(t, configText)
	// mk-live has no mount of its own: its pods' subPaths follow updates (the subPath pods).
	classes := []any{map[string]any{"name": "mk-sshfs", "mounts": []any{classMount}},
		map[string]any{"name": "mk-live", "subPathUpdates": "live"}}
	values := func(tag string) string {
		t.Helper()
		v := map[string]any{
			"image":             map[string]any{"tag": tag},
			"hostNamespacesPID": os.Getpid(),
			"uninstall":         map[string]any{"enabled": false},
			"containerd":        map[string]any{"configFile": n.ctrd.ConfigPath(), "dropIn": filepath.Join(filepath.Dir(n.ctrd.ConfigPath()), "conf.d", "99-mountkeeper.toml")},
			"installDir":        filepath.Join(n.dir, "hookbin"),
			"nri":               map[string]any{"socket": n.ctrd.NRISocket()},
			"log":               map[string]any{"level": "debug"},
			"metrics":           map[string]any{"nodeListener": map[string]any{"enabled": true, "port": 9659, "tls": map[string]any{"secretName": "mountkeeper-metrics-tls"}}},
			"runtimeClasses":    classes,
			"config":            config,
		}
		data, _ := json.Marshal(v) // YAML is a superset of JSON
		path := filepath.Join(n.dir, "values-"+tag+".yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	kubeconfig := n.kube.AdminKubeconfig()
	helm := func(args ...string) string {
		t.Helper()
		return runHelm(t, ctx, helmBin, kubeconfig, append(args, "--namespace", deployNS)...)
	}
	chart := filepath.Join(deployDir, "helm", "mountkeeper")
	defer func() {
		// Before the node's cleanup: no DaemonSet controller recreating the agent pod.
		helm("uninstall", "mountkeeper", "--wait", "--timeout", "60s")
		pods, err := n.api.ListPods(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if err := n.api.DeletePod(ctx, p.Metadata.Namespace, p.Metadata.Name, 1); err != nil && !harness.IsNotFound(err) {
				t.Error(err)
			}
		}
		if err := harnessPoll(ctx, 60*time.Second, func() error {
			left, err := n.api.ListPods(ctx, "")
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("%d pods left", len(left))
			}
			return err
		}); err != nil {
			t.Errorf("%v\nkubelet log:\n%s", err, tailFile(n.kube.LogPath("kubelet"), 6000))
		}
	}()

	// The node listener's certificate (metrics.nodeListener.tls.secretName): a Secret made
	// before the install, as cert-manager would.
	// (The controller manager gives it its default ServiceAccount.)
	if err := n.api.Do(ctx, "POST", "/api/v1/namespaces", "", map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": deployNS},
	}, nil); err != nil {
		t.Fatal(err)
	}
	tlsCert, tlsKey := selfSignedPair(t, metricsServerName)
	if err := n.api.Do(ctx, "POST", "/api/v1/namespaces/"+deployNS+"/secrets", "", map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": map[string]any{"name": "mountkeeper-metrics-tls"},
		"stringData": map[string]any{"tls.crt": string(tlsCert), "tls.key": string(tlsKey), "ca.crt": string(tlsCert)},
	}, nil); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	helm("install", "mountkeeper", chart, "--values", values("e2e-a"))
	plugin := n.waitRollout(t, "e2e-a", 120*time.Second)
	t.Logf("helm install: agent pod %s of the DaemonSet connected after %v", plugin, time.Since(start).Round(time.Millisecond))
	n.checkListenerCertificate(t, plugin, tlsCert)
	// The chart's update strategy is what the DaemonSet controller rolls by: one node's agent
	// pod away at a time, no second one beside it.
	var ds struct {
		Spec struct {
			UpdateStrategy struct {
				Type          string `json:"type"`
				RollingUpdate struct {
					MaxUnavailable any `json:"maxUnavailable"`
					MaxSurge       any `json:"maxSurge"`
				} `json:"rollingUpdate"`
			} `json:"updateStrategy"`
		} `json:"spec"`
	}
	if err := n.api.Do(ctx, "GET", "/apis/apps/v1/namespaces/"+deployNS+"/daemonsets/mountkeeper", "", nil, &ds); err != nil {
		t.Fatal(err)
	}
	if u := ds.Spec.UpdateStrategy; u.Type != "RollingUpdate" || fmt.Sprint(u.RollingUpdate.MaxUnavailable) != "1" || fmt.Sprint(u.RollingUpdate.MaxSurge) != "0" {
		t.Errorf("the DaemonSet's update strategy is %+v, want RollingUpdate, maxUnavailable 1, maxSurge 0", u)
	}
	// The init container declared the class's handler; containerd reads it at start.
	if err := n.ctrd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	readerVolumes := []any{map[string]any{"name": "reads", "hostPath": map[string]any{"path": reads, "type": "Directory"}}}
	readerMounts := []any{map[string]any{"name": "reads", "mountPath": "/reads"}}
	n.runPod(t, "sshfs-reader", "mk-sshfs",
		`while true; do if cat /data/hello >/dev/null 2>&1; then echo ok; else echo FAIL; fi >> /reads/log; sleep 0.1; done`,
		false, readerVolumes, readerMounts)
	mountPoint, daemon := n.sshfsMount(t)
	mountID := mountIDAt(t, mountPoint)
	t.Logf("sshfs host mount %s (mount ID %s), FUSE daemon %d", mountPoint, mountID, daemon)
	sub := n.startRolloutSubPaths(t)

	steps := []struct {
		name, tag string
		args      []string
	}{
		{"upgrade to B", "e2e-b", []string{"upgrade", "mountkeeper", chart, "--values", values("e2e-b")}},
		{"rollback to A", "e2e-a", []string{"rollback", "mountkeeper", "1"}},
	}
	for i, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			okBefore, failBefore := countLog(t, filepath.Join(reads, "log"))
			subReadsBefore, _ := sub.reads(t)
			liveMounts, kubeletMounts := sub.mountIDs(t, subPathLive), sub.mountIDs(t, subPathKubelet)
			oldAgent := n.pluginPID(t)
			start := time.Now()
			t.Logf("helm %s:\n%s", s.args[0], helm(s.args...))
			// The DaemonSet controller deletes the old agent pod (maxUnavailable 1, one node):
			// from then on until the new one connects, a class container meets the guard.
			n.waitPodLeaving(t, plugin, 60*time.Second)
			leaving := time.Since(start)
			mid := fmt.Sprintf("mid-rollout-%d", i)
			pod := n.podManifest(podSpec{name: mid, runtimeClass: "mk-sshfs", script: rolloutMidScript, volumes: readerVolumes, mounts: readerMounts})
			c := pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			c["env"] = []any{map[string]any{"name": "POD", "value": mid}}
			created := time.Now()
			if _, err := n.api.CreatePod(ctx, "default", pod); err != nil {
				t.Fatal(err)
			}
			gap := sub.patchInGap(t, oldAgent)
			plugin = n.waitRollout(t, s.tag, 120*time.Second)
			rolled := time.Since(start)
			connected := n.connectedAt(t, plugin)
			id := n.waitRunning(t, mid, 90*time.Second)
			waited := time.Since(created)
			var refusal string
			for _, e := range n.eventsTextLines("default", mid) {
				if strings.Contains(e, "did not handle this container") {
					refusal = e
				}
			}
			data, err := os.ReadFile(filepath.Join(reads, mid))
			if err != nil || strings.TrimSpace(string(data)) != "mounted" {
				t.Errorf("the class pod created during the rollout found at its start: %q (%v), want its sshfs mount", data, err)
			}
			if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
				t.Errorf("the class pod created during the rollout reads %q (exit %d)", out, code)
			}
			time.Sleep(time.Second) // reads after the new agent took over
			okAfter, failAfter := countLog(t, filepath.Join(reads, "log"))
			subReadsAfter, subFailed := sub.reads(t)
			if failAfter > failBefore || okAfter-okBefore < 10 {
				t.Errorf("reads during the rollout: %d ok, %d failed", okAfter-okBefore, failAfter-failBefore)
			}
			if mp, d := n.sshfsMount(t); mp != mountPoint || d != daemon || mountIDAt(t, mp) != mountID {
				t.Errorf("after the rollout: mount %s (ID %s), daemon %d; want %s (ID %s), %d (adopted)", mp, mountIDAt(t, mp), d, mountPoint, mountID, daemon)
			}
			if c := fuseMountsAt(t, mountPoint); c != 1 {
				t.Errorf("%d sshfs mounts at %s after the rollout, want 1", c, mountPoint)
			}
			log := n.podLog(plugin, "mountkeeper")
			if !strings.Contains(log, "mountkeeper "+s.tag+": config from") || !strings.Contains(log, "adopted the mount found at start-up") {
				t.Errorf("the new agent pod %s does not log version %s and an adoption:\n%s", plugin, s.tag, log)
			}
			n.checkListenerCertificate(t, plugin, tlsCert)
			sub.checkRollout(t, s.name, subReadsBefore, subReadsAfter, subFailed, liveMounts, kubeletMounts, gap, connected)
			outcome := "started without a refusal (an agent was connected when its container was created)"
			if refusal != "" {
				outcome = "refused by the guard, then started with its mount once the new agent was up"
				t.Logf("the refusal kubectl describe pod shows: %s", refusal)
			}
			t.Logf("rollout %s: old agent pod leaving after %v, new agent pod %s available after %v; reads during it: %d ok, %d failed; the class pod created mid-rollout waited %v: %s",
				s.name, leaving.Round(time.Millisecond), plugin, rolled.Round(time.Millisecond), okAfter-okBefore, failAfter-failBefore, waited.Round(time.Millisecond), outcome)
		})
		if !ok {
			t.FailNow()
		}
	}
	sub.restartKubeletPod(t)
}
