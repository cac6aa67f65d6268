//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// withHandler is the harness's containerd config with handler, a copy of runc's.
func withHandler(t *testing.T, config []byte, handler string) []byte {
	t.Helper()
	re := regexp.MustCompile(`(?s)\s*\[plugins\.'io\.containerd\.cri\.v1\.runtime'\.containerd\.runtimes\.'runc'\].*?SystemdCgroup = \w+\n`)
	runc := re.Find(config)
	if runc == nil {
		t.Fatalf("no runc handler in containerd's config:\n%s", config)
	}
	copied := strings.ReplaceAll(string(runc), "runtimes.'runc'", "runtimes.'"+handler+"'")
	return []byte(strings.Replace(string(config), string(runc), string(runc)+copied, 1))
}

// labelerCredentials are a ServiceAccount token (TokenRequest) and the API server's CA, as
// the chart's pod has them.
func labelerCredentials(t *testing.T, ctx context.Context, n *kubeNode) (token, caFile string) {
	t.Helper()
	sa := map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "mk-labeler"}}
	if err := n.api.Do(ctx, "POST", "/api/v1/namespaces/default/serviceaccounts", "", sa, nil); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		Status struct{ Token string } `json:"status"`
	}
	req := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 3600}}
	if err := n.api.Do(ctx, "POST", "/api/v1/namespaces/default/serviceaccounts/mk-labeler/token", "", req, &tr); err != nil {
		t.Fatal(err)
	}
	token = filepath.Join(n.dir, "labeler-token")
	if err := os.WriteFile(token, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	return token, n.kube.CAFile()
}

// createPodRetrying creates pod in default, retrying while the controller manager has not
// made the namespace's default ServiceAccount yet.
func createPodRetrying(t *testing.T, ctx context.Context, n *kubeNode, pod map[string]any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := n.api.CreatePod(ctx, "default", pod)
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "serviceaccount") || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// scheduledCondition is the pod's PodScheduled reason and its phase.
func scheduledCondition(t *testing.T, ctx context.Context, n *kubeNode, name string) (reason, phase string) {
	t.Helper()
	var p struct {
		Status struct {
			Phase      string
			Conditions []struct{ Type, Status, Reason, Message string }
		}
	}
	if err := n.api.Do(ctx, "GET", "/api/v1/namespaces/default/pods/"+name, "", nil, &p); err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == "PodScheduled" {
			t.Logf("pod %s: PodScheduled %s %s: %s", name, c.Status, c.Reason, c.Message)
			return c.Reason, p.Status.Phase
		}
	}
	return "", p.Status.Phase
}

// nodeLabels are the node's labels.
func nodeLabels(t *testing.T, ctx context.Context, n *kubeNode) map[string]string {
	t.Helper()
	var node struct{ Metadata harness.ObjectMeta }
	if err := n.api.Do(ctx, "GET", "/api/v1/nodes/"+n.kube.NodeName(), "", nil, &node); err != nil {
		t.Fatal(err)
	}
	return node.Metadata.Labels
}
