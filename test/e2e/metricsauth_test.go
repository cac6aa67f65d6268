//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// TestMetricsAuthorization runs the agent with --metrics-listen against a real kube-apiserver
// with RBAC, its rights those of deploy/rbac.yaml: a ServiceAccount token whose user may get
// /metrics (bound to deploy's mountkeeper-metrics-reader) gets the scrape, one whose user may
// not gets 403, no token or a forged one 401; /status is not served there (only on loopback).
// With the API server hung (SIGSTOP), a token not seen before gets 503 within
// --metrics-auth-timeout, never a hang, while a token allowed a moment ago still scrapes (the
// cached answer). The agent's own token can do nothing else (listing pods: 403).
func TestMetricsAuthorization(t *testing.T) {
	testenv.Require(t, "root")
	opts := harness.KubeOptions{Authorization: "RBAC", Log: testWriter{t, "kube"}}
	if why := harness.KubeAPIMissing(opts); why != "" {
		testenv.Skip(t, "no API server: %s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k, err := harness.StartKubeAPI(ctx, opts)
	t.Cleanup(func() {
		if err := k.Close(); err != nil {
			t.Errorf("cleanup API server: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	api := k.API()
	create := func(path string, obj any) {
		t.Helper()
		if err := api.Do(ctx, "POST", path, "", obj, nil); err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
	}
	paths := map[string]string{
		"Namespace":          "/api/v1/namespaces",
		"ServiceAccount":     "/api/v1/namespaces/%s/serviceaccounts",
		"ClusterRole":        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		"ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
	}
	for _, file := range []string{"namespace.yaml", "rbac.yaml"} {
		for _, obj := range readYAML(t, filepath.Join(deployDir, file)) {
			kind, _ := obj["kind"].(string)
			path, ok := paths[kind]
			if !ok {
				t.Fatalf("deploy/%s: a %s, which this test does not know how to create", file, kind)
			}
			if strings.Contains(path, "%s") {
				path = fmt.Sprintf(path, obj["metadata"].(map[string]any)["namespace"])
			}
			create(path, obj)
		}
	}
	// The scrapers: prometheus may get /metrics (deploy's reader role), nosy and late may not.
	create("/api/v1/namespaces", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "monitoring"}})
	for _, sa := range []string{"prometheus", "nosy", "late"} {
		create("/api/v1/namespaces/monitoring/serviceaccounts", map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": sa}})
	}
	create(paths["ClusterRoleBinding"], map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": "prometheus-reads-mountkeeper"},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mountkeeper-metrics-reader"},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}},
	})
	token := func(ns, sa string) string {
		t.Helper()
		var out struct {
			Status struct{ Token string } `json:"status"`
		}
		err := api.Do(ctx, "POST", "/api/v1/namespaces/"+ns+"/serviceaccounts/"+sa+"/token", "", map[string]any{
			"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 3600},
		}, &out)
		if err != nil || out.Status.Token == "" {
			t.Fatalf("token of %s/%s: %v", ns, sa, err)
		}
		return out.Status.Token
	}
	agentToken, promToken, nosyToken, lateToken := token("mountkeeper", "mountkeeper"), token("monitoring", "prometheus"), token("monitoring", "nosy"), token("monitoring", "late")

	dir := harness.WorkDir(t, "mk-e2e-")
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin, err := harness.BuildMountkeeper(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "sa", "token")
	if err := os.MkdirAll(filepath.Dir(tokenFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(agentToken), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.yaml")
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte(fmt.Sprintf("stateDir: %s\nruntimeClasses:\n  mk-m:\n    mounts: [{source: %s, destination: /m}]\n", filepath.Join(dir, "state"), filepath.Join(dir, "src"))), 0o644); err != nil {
		t.Fatal(err)
	}
	ports := freeTCPPorts(t, 2)
	metricsAddr, localAddr := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	// No runtime: the plugin retries its NRI socket meanwhile; the listeners serve all along.
	agent := exec.Command(bin, "nri", "--config", config, "--socket", filepath.Join(dir, "nri.sock"),
		"--listen", localAddr, "--metrics-listen", metricsAddr, "--kube-api", k.APIURL(),
		"--kube-token-file", tokenFile, "--kube-ca-file", k.CAFile(), "--metrics-auth-timeout", "2s")
	agent.Stdout, agent.Stderr = testWriter{t, "mountkeeper"}, testWriter{t, "mountkeeper"}
	agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		agent.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { agent.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			agent.Process.Kill()
			<-done
		}
	})

	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		// The agent's certificate is self-signed (no --metrics-tls-cert), as a PodMonitor's
		// insecureSkipVerify expects.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	scrape := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+metricsAddr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	testsupport.Eventually(t, 20*time.Second, 100*time.Millisecond, "the metrics listener answers", func() bool { code, _ := scrape("/metrics", ""); return code != 0 })

	for _, c := range []struct {
		name, path, token string
		want              int
	}{
		{"a token allowed to get /metrics", "/metrics", promToken, 200},
		{"a token of a user without the right", "/metrics", nosyToken, 403},
		{"no token", "/metrics", "", 401},
		{"a forged token", "/metrics", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", 401},
		{"the agent's own token (it may review, not read metrics)", "/metrics", agentToken, 403},
		{"/status on the node listener", "/status", promToken, 404},
		{"/healthz on the node listener", "/healthz", promToken, 404},
	} {
		code, body := scrape(c.path, c.token)
		if code != c.want {
			t.Errorf("%s: HTTP %d, want %d: %s", c.name, code, c.want, firstLine(body))
		}
		if code == 200 && !strings.Contains(body, "mountkeeper_build_info{") {
			t.Errorf("%s: the scrape has no mountkeeper_build_info", c.name)
		}
	}
	// /status and the probes stay on loopback, unauthenticated there.
	if resp, err := http.Get("http://" + localAddr + "/status"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/status on the local listener: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// The agent's ServiceAccount can do nothing beyond its reviews.
	req, _ := http.NewRequestWithContext(ctx, "GET", k.APIURL()+"/api/v1/pods", nil)
	req.Header.Set("Authorization", "Bearer "+agentToken)
	if resp, err := apiClient(t, k).Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("the agent's token listing pods: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}

	// The API server hangs: a new token is answered 503 within the review timeout (2s); the
	// token allowed a moment ago is still served from the cache.
	resume, err := k.PauseAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, body := scrape("/metrics", lateToken)
	took := time.Since(start)
	t.Logf("scrape with the API server hung: HTTP %d after %v", code, took.Round(time.Millisecond))
	if code != 503 {
		t.Errorf("API server hung, a new token: HTTP %d, want 503: %s", code, firstLine(body))
	}
	if took > 15*time.Second {
		t.Errorf("API server hung: the scrape took %v, more than the 2s review timeout allows", took)
	}
	if code, body := scrape("/metrics", promToken); code != 200 {
		t.Errorf("API server hung, a token allowed a moment ago: HTTP %d, want 200 from the cache: %s", code, firstLine(body))
	}
	resume()
	testsupport.Eventually(t, 60*time.Second, 100*time.Millisecond, "a new token is reviewed once the API server is back", func() bool { code, _ := scrape("/metrics", lateToken); return code == 403 })
}
