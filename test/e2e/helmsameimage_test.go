//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestHelmUpgradeAddsClassSameImage: `helm upgrade` that only adds a class, with the same
// image, reaches the runtime. The real DaemonSet controller replaces the agent's pod (the
// template differs only in its runtime-config checksum), whose init container declares the new
// class's handler; after the restart the chart asks for, the node is labelled for it and the
// scheduler places a pod of the new class, which reads its mount.
func TestHelmUpgradeAddsClassSameImage(t *testing.T) {
	helmBin := pinnedHelm()
	testenv.Require(t, helmBin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	n := &deployNode{kubeNode: newKubeNodeCtrd(t, ctx, harness.KubeOptions{ControlPlane: true,
		FeatureGates: map[string]bool{"KubeletCrashLoopBackOffMax": true}, MaxContainerRestartPeriod: time.Second}, nil, harness.Options{})}
	for _, d := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(n.dir, "src", "helm", d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.dir, "src", "helm", d, "marker"), []byte("helm-"+d+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const tag = "e2e-same"
	n.template = map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"image": harness.AgentImageRepository + ":" + tag}}}}
	n.installImage()
	chart := filepath.Join(deployDir, "helm", "mountkeeper")
	values := func(classes ...string) string {
		t.Helper()
		var rcs []any
		for _, c := range classes {
			rcs = append(rcs, map[string]any{"name": "mk-same-" + c, "mounts": []any{map[string]any{
				"source": filepath.Join(n.dir, "src", "helm", c), "destination": "/" + c, "readOnly": true}}})
		}
		data, _ := json.Marshal(map[string]any{
			"image":             map[string]any{"tag": tag},
			"hostNamespacesPID": os.Getpid(),
			"uninstall":         map[string]any{"enabled": false},
			"containerd":        map[string]any{"configFile": n.ctrd.ConfigPath(), "dropIn": filepath.Join(filepath.Dir(n.ctrd.ConfigPath()), "conf.d", "99-mountkeeper.toml")},
			"installDir":        filepath.Join(n.dir, "hookbin"),
			"nri":               map[string]any{"socket": n.ctrd.NRISocket()},
			"nodeLabels":        map[string]any{"criSocket": n.ctrd.Socket(), "interval": "1s", "apiServer": n.kube.APIURL()},
			"metrics":           map[string]any{"nodeListener": map[string]any{"enabled": false}},
			"runtimeClasses":    rcs,
			"config":            map[string]any{"kubeletRoot": n.kube.RootDir(), "stateDir": filepath.Join(n.dir, "state")},
		})
		path := filepath.Join(n.dir, fmt.Sprintf("values-%d.yaml", len(classes)))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	helm := func(args ...string) {
		t.Helper()
		runHelm(t, ctx, helmBin, n.kube.AdminKubeconfig(), append(args, "--namespace", deployNS)...)
	}
	// classPod is a pod of class placed by the scheduler (the RuntimeClass selects the node
	// label); it returns the container's ID once it runs.
	classPod := func(name, class string) string {
		t.Helper()
		pod := n.podManifest(podSpec{name: name, runtimeClass: class, script: "exec sleep 3600"})
		spec := pod["spec"].(map[string]any)
		delete(spec, "nodeName")
		spec["tolerations"] = []any{map[string]any{"operator": "Exists"}} // no CNI: NotReady
		createPodRetrying(t, ctx, n.kubeNode, pod)
		return n.waitRunning(t, name, 90*time.Second)
	}
	readsMarker := func(id, d string) {
		t.Helper()
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/"+d+"/marker"); code != 0 || out != "helm-"+d+"\n" {
			t.Fatalf("the class pod reads %q (exit %d) at /%s/marker, want helm-%s", out, code, d, d)
		}
	}

	helm("install", "mountkeeper", chart, "--create-namespace", "--values", values("a"))
	// Deferred, not a Cleanup: ctx (the node's too) ends when the test function returns.
	defer uninstallRelease(t, n, helm)
	agent := n.waitAgentPod(t)
	if err := n.ctrd.Restart(ctx); err != nil { // the operator's restart after the install
		t.Fatal(err)
	}
	n.waitConnected(t, agent, 2)
	readsMarker(classPod("same-a", "mk-same-a"), "a")
	before := agentTemplate(t, ctx, n)
	t.Logf("installed, class a runs, after %v", time.Since(start).Round(time.Second))

	upgraded := time.Now()
	helm("upgrade", "mountkeeper", chart, "--values", values("a", "b"))
	after := agentTemplate(t, ctx, n)
	if before.image != after.image {
		t.Fatalf("the upgrade changed the image %s -> %s; this test is about the same image", before.image, after.image)
	}
	if before.checksum == after.checksum {
		t.Errorf("the upgrade adding a class left the pod template's mountkeeper.io/runtime-config %q: the DaemonSet does not roll", after.checksum)
	}
	var next string
	if err := harnessPoll(ctx, 2*time.Minute, func() error {
		pods, err := n.api.ListPods(ctx, deployNS)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if p.Metadata.Name != agent && p.Metadata.Labels["app.kubernetes.io/name"] == "mountkeeper" {
				for _, c := range p.Status.ContainerStatuses {
					if c.Name == "mountkeeper" && c.State.Running != nil {
						next = p.Metadata.Name
						return nil
					}
				}
			}
		}
		return errors.New("the DaemonSet has not replaced the agent's pod " + agent)
	}); err != nil {
		t.Fatal(err)
	}
	n.waitConnected(t, next, 1)
	if err := n.ctrd.Restart(ctx); err != nil { // the restart the chart asks for
		t.Fatal(err)
	}
	n.waitConnected(t, next, 2)
	readsMarker(classPod("same-b", "mk-same-b"), "b")
	t.Logf("upgraded: a pod of the added class runs %v after helm upgrade; test took %v",
		time.Since(upgraded).Round(time.Second), time.Since(start).Round(time.Second))
}

type agentTemplateInfo struct{ image, checksum string }
