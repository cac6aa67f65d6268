//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/nodelabel"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestNodeLabelFollowsRuntimeHandlers runs `mountkeeper node label` against the real
// containerd's CRI and the real API server, kube-scheduler and kubelet: a pod of a class whose
// RuntimeClass selects the label (as the chart renders it) stays Pending, unscheduled and not
// failed, while the running containerd lacks the class's handler, although the handler is
// already in the config file; once containerd restarts with it the node is labelled and the
// pod runs; a restart without the handler takes the label away again.
func TestNodeLabelFollowsRuntimeHandlers(t *testing.T) {
	bin := cmp.Or(os.Getenv("MOUNTKEEPER_BIN"), "/var/cache/mountkeeper-test/bin")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	const class = "mk-label"
	n := newKubeNodeCtrd(t, ctx, harness.KubeOptions{BinDir: bin, ControlPlane: true}, nil, harness.Options{BinDir: bin})
	withoutHandler, err := os.ReadFile(n.ctrd.ConfigPath())
	if err != nil {
		t.Fatal(err)
	}

	// The RuntimeClass as the chart renders it.
	rc := map[string]any{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
		"metadata": map[string]any{"name": class}, "handler": class,
		"scheduling": map[string]any{"nodeSelector": map[string]string{nodelabel.Key(class): "true"}}}
	if err := n.api.Do(ctx, "POST", "/apis/node.k8s.io/v1/runtimeclasses", "", rc, nil); err != nil {
		t.Fatal(err)
	}
	token, caFile := labelerCredentials(t, ctx, n)
	config := filepath.Join(n.dir, "label-config.yaml")
	if err := os.WriteFile(config, []byte("runtimeClasses:\n  "+class+":\n    mounts:\n      - {source: "+filepath.Join(n.dir, "src", "class")+", destination: /class, propagation: None, readOnly: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	labeler := exec.CommandContext(ctx, n.bin, "node", "label", "--node", n.kube.NodeName(), "--config", config,
		"--cri-socket", n.ctrd.Socket(), "--interval", "500ms",
		"--kube-api", n.kube.APIURL(), "--kube-token-file", token, "--kube-ca-file", caFile)
	labeler.Stdout, labeler.Stderr = testWriter{t, "node label"}, testWriter{t, "node label"}
	if err := labeler.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = labeler.Process.Kill(); _ = labeler.Wait() })

	// The handler in the file, not yet in the running containerd.
	if err := os.WriteFile(n.ctrd.ConfigPath(), withHandler(t, withoutHandler, class), 0o600); err != nil {
		t.Fatal(err)
	}
	pod := n.podManifest(podSpec{name: "label-pod", runtimeClass: class, script: "exec sleep 3600"})
	spec := pod["spec"].(map[string]any)
	delete(spec, "nodeName") // the scheduler places it
	// The node has no CNI: NotReady and tainted, which this test is not about.
	spec["tolerations"] = []any{map[string]any{"operator": "Exists"}}
	createPodRetrying(t, ctx, n, pod)
	time.Sleep(4 * time.Second) // 8 looks of the labeler
	if reason, phase := scheduledCondition(t, ctx, n, "label-pod"); reason != "Unschedulable" || phase != "Pending" {
		t.Fatalf("before containerd loaded the handler: pod %s, PodScheduled reason %q, want Pending and Unschedulable", phase, reason)
	}
	if labels := nodeLabels(t, ctx, n); labels[nodelabel.Key(class)] != "" {
		t.Fatalf("the node is labelled %s=%s before containerd loaded the handler", nodelabel.Key(class), labels[nodelabel.Key(class)])
	}

	restarted := time.Now()
	if err := n.ctrd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.api.WaitPod(ctx, "default", "label-pod", 90*time.Second, func(p *harness.Pod) error {
		if p.Status.Phase != "Running" {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	}); err != nil {
		t.Fatalf("after containerd loaded the handler: %v (node labels %v)", err, nodeLabels(t, ctx, n))
	}
	t.Logf("the class pod runs %v after the restart", time.Since(restarted).Round(100*time.Millisecond))

	// containerd restarted without the handler: the label goes.
	if err := os.WriteFile(n.ctrd.ConfigPath(), withoutHandler, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.ctrd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for nodeLabels(t, ctx, n)[nodelabel.Key(class)] != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the node keeps %s after containerd restarted without the handler", nodelabel.Key(class))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("test took %v", time.Since(start).Round(time.Second))
}
