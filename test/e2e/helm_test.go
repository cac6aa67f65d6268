//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// helmValues are the chart values of TestHelmChart; TAG, DIR, KUBELET and CLASSES are
// replaced. The node paths keep the chart's defaults: startPluginPod points them at the
// test's node as it does for deploy/. No uninstall hook: this node has no controllers to run
// its DaemonSet and place its pod (TestHelmUninstall runs it on a node that has them).
const helmValues = `image:
  tag: TAG
uninstall:
  enabled: false
runtimeClasses:
CLASSES
config:
  kubeletRoot: KUBELET
  stateDir: DIR/state
`

// TestHelmChart installs, upgrades and uninstalls the chart with the pinned helm against the
// node's real kube-apiserver, and runs the plugin from the chart's DaemonSet on the real
// kubelet and containerd. There is no controller manager on this node yet: the DaemonSet is
// stored but no controller makes its pod, so (as TestKubeDeploy does) the test creates the
// pod from the DaemonSet's template as the DaemonSet controller would, and replaces it after
// the upgrade as a rolling update would.
func TestHelmChart(t *testing.T) {
	helmBin := pinnedHelm()
	testenv.Require(t, helmBin)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	n := &deployNode{kubeNode: newKubeNodeWith(t, ctx, harness.KubeOptions{
		FeatureGates:              map[string]bool{"KubeletCrashLoopBackOffMax": true},
		MaxContainerRestartPeriod: time.Second,
	}, []string{"mk-helm"})}
	// The chart owns the RuntimeClass of its class.
	if err := n.api.DeleteRuntimeClass(ctx, "mk-helm"); err != nil {
		t.Fatal(err)
	}
	kubeconfig := n.kube.AdminKubeconfig()
	for _, d := range []string{"a", "b", "c"} {
		if err := os.MkdirAll(filepath.Join(n.dir, "src", "helm", d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.dir, "src", "helm", d, "marker"), []byte("helm-"+d+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	helm := func(args ...string) string {
		t.Helper()
		return runHelm(t, ctx, helmBin, kubeconfig, args...)
	}
	values := func(tag string, classes ...string) string {
		t.Helper()
		text := strings.NewReplacer("TAG", tag, "CLASSES", strings.TrimSuffix(strings.Join(classes, ""), "\n"),
			"KUBELET", n.kube.RootDir()).Replace(helmValues)
		text = strings.ReplaceAll(text, "DIR", n.dir)
		path := filepath.Join(n.dir, "values-"+tag+".yaml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	chart := filepath.Join(deployDir, "helm", "mountkeeper")
	exists := func(path string) bool {
		t.Helper()
		err := n.api.Do(ctx, "GET", path, "", nil, nil)
		if err != nil && !harness.IsNotFound(err) {
			t.Fatalf("GET %s: %v", path, err)
		}
		return err == nil
	}

	// The release's state, so that each subtest first brings the node to the state it starts
	// from (atV1, atV2Extra) and any one runs alone (-run 'TestHelmChart/^upgrade'): run in
	// order, each finds the state the one before left and does nothing more.
	var (
		plugin  string // the plugin pod; "" when no release is installed
		release string // the values of the installed release: v1, v2+extra or v2
	)
	installV1 := func(t *testing.T) {
		t.Helper()
		out := helm("install", "mountkeeper", chart, "--namespace", deployNS, "--create-namespace", "--values", values("e2e-v1", helmClass("mk-helm", "a")))
		t.Logf("helm install:\n%s", out)
		n.namespaceStandIns(deployNS)
		// Also reads the DaemonSet's pod template, which startPlugin starts a pod from.
		n.checkChartObjects(t, "e2e-v1", []string{"mk-helm"})
		release = "v1"
	}
	startPlugin := func(t *testing.T) {
		t.Helper()
		n.installImage()
		plugin = n.startPluginPod(t)
	}
	// The init container declared the class's handler; containerd reads it at start.
	restartContainerd := func(t *testing.T) {
		t.Helper()
		if err := n.ctrd.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	upgradeV2Extra := func(t *testing.T) {
		t.Helper()
		out := helm("upgrade", "mountkeeper", chart, "--namespace", deployNS,
			"--values", values("e2e-v2", helmClass("mk-helm", "a", "b"), helmClass("mk-helm-extra", "c")))
		t.Logf("helm upgrade:\n%s", out)
		n.checkChartObjects(t, "e2e-v2", []string{"mk-helm", "mk-helm-extra"})
		release = "v2+extra"
	}
	// The rolling update's step on this node: the old pod goes, one from the new template
	// comes.
	rollPlugin := func(t *testing.T) {
		t.Helper()
		n.deletePluginPod(t, plugin)
		startPlugin(t)
	}
	atV1 := func(t *testing.T) {
		t.Helper()
		if plugin == "" {
			installV1(t)
			startPlugin(t)
			restartContainerd(t)
		}
	}
	atV2Extra := func(t *testing.T) {
		t.Helper()
		atV1(t)
		if release != "v2+extra" {
			upgradeV2Extra(t)
			rollPlugin(t)
		}
	}

	t.Run("install: the objects, the plugin pod from the DaemonSet, a class pod with its mount", func(t *testing.T) {
		installV1(t)
		// The node listener's RBAC (metrics.nodeListener, on by default); no PodMonitor or
		// PrometheusRule by default: this API server has no Prometheus Operator CRDs, and the
		// install above would have failed on them.
		for _, path := range chartRBAC {
			if !exists(path) {
				t.Errorf("the chart did not create %s", path)
			}
		}
		startPlugin(t)
		n.checkNodeListener(t, plugin)
		restartContainerd(t)
		id := n.runPod(t, "helm-a", "mk-helm", "exec sleep 3600", false, nil, nil)
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/a/marker"); code != 0 || out != "helm-a\n" {
			t.Errorf("the class pod reads %q (exit %d) at /a/marker, want helm-a", out, code)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("upgrade: a new image tag, a mount and a class added; the new pod serves them", func(t *testing.T) {
		atV1(t)
		upgradeV2Extra(t)
		rollPlugin(t)
		id := n.runPod(t, "helm-ab", "mk-helm", "exec sleep 3600", false, nil, nil)
		for _, d := range []string{"a", "b"} {
			if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/"+d+"/marker"); code != 0 || out != "helm-"+d+"\n" {
				t.Errorf("after the upgrade the class pod reads %q (exit %d) at /%s/marker", out, code, d)
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("upgrade removing a class deletes its RuntimeClass", func(t *testing.T) {
		atV2Extra(t)
		helm("upgrade", "mountkeeper", chart, "--namespace", deployNS, "--values", values("e2e-v2", helmClass("mk-helm", "a", "b")))
		release = "v2"
		n.checkChartObjects(t, "e2e-v2", []string{"mk-helm"})
		if exists("/apis/node.k8s.io/v1/runtimeclasses/mk-helm-extra") {
			t.Error("RuntimeClass mk-helm-extra is still there after its class was removed from the values")
		}
	})

	t.Run("uninstall removes every object of the release", func(t *testing.T) {
		atV1(t)
		n.deletePluginPod(t, plugin)
		plugin, release = "", ""
		t.Logf("helm uninstall:\n%s", helm("uninstall", "mountkeeper", "--namespace", deployNS))
		for _, path := range append([]string{
			"/apis/apps/v1/namespaces/" + deployNS + "/daemonsets/mountkeeper",
			"/api/v1/namespaces/" + deployNS + "/configmaps/mountkeeper-config",
			"/apis/node.k8s.io/v1/runtimeclasses/mk-helm",
		}, chartRBAC...) {
			if exists(path) {
				t.Errorf("%s is still there after helm uninstall", path)
			}
		}
		if out := helm("list", "--namespace", deployNS, "--all", "--short"); strings.TrimSpace(out) != "" {
			t.Errorf("helm still lists a release after the uninstall: %q", out)
		}
	})
}
