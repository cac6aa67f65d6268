package kubeauth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// In a pod, where the API server and the ServiceAccount's credentials are.
const (
	ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	DefaultTokenFile  = ServiceAccountDir + "/token"
	DefaultCAFile     = ServiceAccountDir + "/ca.crt"
)

// InClusterServer is the API server's URL from the environment kubelet gives a pod, "" outside
// one.
func InClusterServer() string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ""
	}
	return "https://" + net.JoinHostPort(host, port)
}

// APIReviewer is a Reviewer that asks the API server at Server over HTTPS.
type APIReviewer struct {
	server    string
	tokenFile string
	hc        *http.Client
}

// NewAPIReviewer asks server (https://host:port), trusting the CA in caFile, with the bearer
// token in tokenFile, read at every call (kubelet rotates a projected ServiceAccount token).
func NewAPIReviewer(server, tokenFile, caFile string) (*APIReviewer, error) {
	if !strings.HasPrefix(server, "https://") {
		return nil, fmt.Errorf("API server %q: want an https:// URL (the tokens it checks must not travel in clear)", server)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("the API server's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	if _, err := os.Stat(tokenFile); err != nil {
		return nil, fmt.Errorf("the agent's token: %w", err)
	}
	return &APIReviewer{server: strings.TrimSuffix(server, "/"), tokenFile: tokenFile, hc: &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 5 * time.Second,
		},
		// Each call is bounded by its context (Options.Timeout); this bounds a caller that
		// forgot one.
		Timeout: 30 * time.Second,
	}}, nil
}

// Authenticate posts a TokenReview.
func (a *APIReviewer) Authenticate(ctx context.Context, token string) (User, bool, error) {
	var out struct {
		Status struct {
			Authenticated bool   `json:"authenticated"`
			User          User   `json:"user"`
			Error         string `json:"error"`
		} `json:"status"`
	}
	err := a.post(ctx, "/apis/authentication.k8s.io/v1/tokenreviews", map[string]any{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
		"spec": map[string]any{"token": token},
	}, &out)
	if err != nil {
		return User{}, false, err
	}
	return out.Status.User, out.Status.Authenticated, nil
}

// Authorize posts a SubjectAccessReview for a non-resource URL.
func (a *APIReviewer) Authorize(ctx context.Context, u User, verb, path string) (bool, error) {
	var out struct {
		Status struct {
			Allowed bool `json:"allowed"`
		} `json:"status"`
	}
	err := a.post(ctx, "/apis/authorization.k8s.io/v1/subjectaccessreviews", map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
		"spec": map[string]any{
			"user": u.Name, "uid": u.UID, "groups": u.Groups, "extra": u.Extra,
			"nonResourceAttributes": map[string]string{"path": path, "verb": verb},
		},
	}, &out)
	return out.Status.Allowed, err
}

func (a *APIReviewer) post(ctx context.Context, path string, body, out any) error {
	own, err := os.ReadFile(a.tokenFile)
	if err != nil {
		return fmt.Errorf("the agent's token: %w", err)
	}
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.server+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(own)))
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var status struct{ Message string }
		msg := strings.TrimSpace(string(answer))
		if json.Unmarshal(answer, &status) == nil && status.Message != "" {
			msg = status.Message
		}
		return fmt.Errorf("POST %s: %s: %s (does the agent's ServiceAccount have deploy/rbac.yaml's rights?)", path, resp.Status, msg)
	}
	return json.Unmarshal(answer, out)
}
