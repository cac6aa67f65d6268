package kubeauth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// Client calls the Kubernetes API over HTTPS with a ServiceAccount's bearer token, read at
// every call (kubelet rotates a projected token): the agent's reviews (APIReviewer) and the
// chart's uninstall hook (internal/uninstallwait).
type Client struct {
	server    string
	tokenFile string
	hc        *http.Client
}

// NewClient asks server (https://host:port), trusting the CA in caFile, with the token in
// tokenFile.
func NewClient(server, tokenFile, caFile string) (*Client, error) {
	if !strings.HasPrefix(server, "https://") {
		return nil, fmt.Errorf("API server %q: want an https:// URL (the token must not travel in clear)", server)
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
		return nil, fmt.Errorf("the ServiceAccount token: %w", err)
	}
	return &Client{server: strings.TrimSuffix(server, "/"), tokenFile: tokenFile, hc: &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 5 * time.Second,
		},
		// Each call is bounded by its context; this bounds a caller that forgot one.
		Timeout: 30 * time.Second,
	}}, nil
}

// StatusError is the API server's answer other than 2xx.
type StatusError struct {
	Method, Path, Status, Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %s: %s", e.Method, e.Path, e.Status, e.Message)
}

// Do sends body (JSON, if not nil) to path and decodes the answer into out (if not nil).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	return c.do(ctx, method, path, "application/json", body, out)
}

// MergePatch sends patch to path as a JSON merge patch (RFC 7386: a null value removes the
// key) and decodes the answer into out (if not nil).
func (c *Client) MergePatch(ctx context.Context, path string, patch, out any) error {
	return c.do(ctx, http.MethodPatch, path, "application/merge-patch+json", patch, out)
}

func (c *Client) do(ctx context.Context, method, path, contentType string, body, out any) error {
	token, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return fmt.Errorf("the ServiceAccount token: %w", err)
	}
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var status struct{ Message string }
		msg := strings.TrimSpace(string(answer))
		if json.Unmarshal(answer, &status) == nil && status.Message != "" {
			msg = status.Message
		}
		return &StatusError{Method: method, Path: path, Status: resp.Status, Message: msg}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(answer, out)
}
