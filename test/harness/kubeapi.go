package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// KubeClient is a minimal Kubernetes API client: JSON over HTTPS with a client certificate.
// Objects are sent as anything encoding/json takes (usually map[string]any) and read back
// into the small structs below, which hold only what the tests look at; this keeps
// client-go and k8s.io/api out of go.mod.
type KubeClient struct {
	base string
	hc   *http.Client
}

func newKubeClient(base, caFile, certFile, keyFile string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*KubeClient, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &KubeClient{base: base, hc: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{
			RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		}},
	}}, nil
}

// APIError is a non-2xx answer of the API server.
type APIError struct {
	Method, Path string
	Code         int
	Message      string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.Path, e.Code, e.Message)
}

// IsNotFound reports whether err is an API 404.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == http.StatusNotFound
}

// IsConflict reports whether err is an API 409 (already exists, or a stale resourceVersion).
func IsConflict(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Code == http.StatusConflict
}

// Do sends body (JSON-encoded, unless nil) with method to path (e.g. "/api/v1/nodes") and
// decodes the answer into out (unless nil). contentType defaults to application/json; a
// PATCH would use application/merge-patch+json or application/strategic-merge-patch+json.
func (c *KubeClient) Do(ctx context.Context, method, path, contentType string, body, out any) error {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		if contentType == "" {
			contentType = "application/json"
		}
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		msg := string(data)
		var status struct{ Message string }
		if json.Unmarshal(data, &status) == nil && status.Message != "" {
			msg = status.Message
		}
		return &APIError{Method: method, Path: path, Code: resp.StatusCode, Message: msg}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// ObjectMeta is the part of metadata the tests use.
type ObjectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace,omitempty"`
	UID             string            `json:"uid,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
}

// Pod is the part of a pod the tests read.
type Pod struct {
	Metadata ObjectMeta `json:"metadata"`
	Spec     struct {
		NodeName         string `json:"nodeName"`
		RuntimeClassName string `json:"runtimeClassName"`
	} `json:"spec"`
	Status PodStatus `json:"status"`
}

// PodStatus is the part of a pod's status the tests read.
type PodStatus struct {
	Phase             string            `json:"phase"`
	HostIP            string            `json:"hostIP"`
	Reason            string            `json:"reason"`
	Message           string            `json:"message"`
	ContainerStatuses []ContainerStatus `json:"containerStatuses"`
}

// ContainerStatus is one container's status: its current and its last finished state.
type ContainerStatus struct {
	Name         string         `json:"name"`
	ContainerID  string         `json:"containerID"`
	Ready        bool           `json:"ready"`
	RestartCount int            `json:"restartCount"`
	State        ContainerState `json:"state"`
	LastState    ContainerState `json:"lastState"`
}

// ContainerState has exactly one of its fields set (or none, for an empty lastState).
type ContainerState struct {
	Waiting *struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"waiting"`
	Running *struct {
		StartedAt string `json:"startedAt"`
	} `json:"running"`
	Terminated *TerminatedState `json:"terminated"`
}

// TerminatedState is a finished container run (or a container that never started: reason
// StartError, with the runtime's error as message).
type TerminatedState struct {
	ExitCode    int    `json:"exitCode"`
	Reason      string `json:"reason"`
	Message     string `json:"message"`
	StartedAt   string `json:"startedAt"`
	FinishedAt  string `json:"finishedAt"`
	ContainerID string `json:"containerID"`
}

// Event is the part of an event the tests read.
type Event struct {
	Metadata       ObjectMeta `json:"metadata"`
	InvolvedObject struct {
		Kind, Name, Namespace, FieldPath string
	} `json:"involvedObject"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Count   int    `json:"count"`
}

func nsPath(ns, resource string) string {
	if ns == "" {
		return "/api/v1/" + resource
	}
	return "/api/v1/namespaces/" + url.PathEscape(ns) + "/" + resource
}

// CreatePod creates pod (a Pod manifest, e.g. a map) in ns and returns what the API stored.
func (c *KubeClient) CreatePod(ctx context.Context, ns string, pod any) (*Pod, error) {
	var out Pod
	if err := c.Do(ctx, http.MethodPost, nsPath(ns, "pods"), "", pod, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetPod reads a pod.
func (c *KubeClient) GetPod(ctx context.Context, ns, name string) (*Pod, error) {
	var out Pod
	if err := c.Do(ctx, http.MethodGet, nsPath(ns, "pods/"+url.PathEscape(name)), "", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListPods lists the pods of ns ("" for every namespace).
func (c *KubeClient) ListPods(ctx context.Context, ns string) ([]Pod, error) {
	var out struct{ Items []Pod }
	if err := c.Do(ctx, http.MethodGet, nsPath(ns, "pods"), "", nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// DeletePod deletes a pod with the given grace period in seconds. Grace 0 removes it from
// the API at once; kubelet then kills its containers on its own.
func (c *KubeClient) DeletePod(ctx context.Context, ns, name string, graceSeconds int) error {
	return c.Do(ctx, http.MethodDelete, nsPath(ns, "pods/"+url.PathEscape(name)), "",
		map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": graceSeconds}, nil)
}

// WaitPod polls a pod until cond holds, ctx ends or timeout passes; it returns the last pod
// read.
func (c *KubeClient) WaitPod(ctx context.Context, ns, name string, timeout time.Duration, cond func(*Pod) error) (*Pod, error) {
	var last *Pod
	err := poll(ctx, timeout, func(ctx context.Context) error {
		p, err := c.GetPod(ctx, ns, name)
		if err != nil {
			return err
		}
		last = p
		return cond(p)
	})
	if err != nil {
		return last, fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	return last, nil
}

// CreateConfigMap creates a configMap with data.
func (c *KubeClient) CreateConfigMap(ctx context.Context, ns, name string, data map[string]string) error {
	return c.Do(ctx, http.MethodPost, nsPath(ns, "configmaps"), "", map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}, "data": data,
	}, nil)
}

// PatchConfigMap merges data into a configMap's data (JSON merge patch).
func (c *KubeClient) PatchConfigMap(ctx context.Context, ns, name string, data map[string]string) error {
	return c.Do(ctx, http.MethodPatch, nsPath(ns, "configmaps/"+url.PathEscape(name)),
		"application/merge-patch+json", map[string]any{"data": data}, nil)
}

// DeleteConfigMap deletes a configMap.
func (c *KubeClient) DeleteConfigMap(ctx context.Context, ns, name string) error {
	return c.Do(ctx, http.MethodDelete, nsPath(ns, "configmaps/"+url.PathEscape(name)), "", nil, nil)
}

// CreateRuntimeClass creates a node.k8s.io/v1 RuntimeClass whose pods run with the CRI
// runtime handler.
func (c *KubeClient) CreateRuntimeClass(ctx context.Context, name, handler string) error {
	return c.Do(ctx, http.MethodPost, "/apis/node.k8s.io/v1/runtimeclasses", "", map[string]any{
		"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": map[string]any{"name": name},
		"handler": handler,
	}, nil)
}

// DeleteRuntimeClass deletes a RuntimeClass.
func (c *KubeClient) DeleteRuntimeClass(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, "/apis/node.k8s.io/v1/runtimeclasses/"+url.PathEscape(name), "", nil, nil)
}

// CreateNamespace creates a namespace (with its default ServiceAccount, which no controller
// would create here).
func (c *KubeClient) CreateNamespace(ctx context.Context, name string) error {
	if err := c.Do(ctx, http.MethodPost, "/api/v1/namespaces", "", map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name},
	}, nil); err != nil {
		return err
	}
	return c.Do(ctx, http.MethodPost, nsPath(name, "serviceaccounts"), "", map[string]any{
		"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default"},
	}, nil)
}

// Events lists the events of ns about the object named name ("" for all).
func (c *KubeClient) Events(ctx context.Context, ns, name string) ([]Event, error) {
	p := nsPath(ns, "events")
	if name != "" {
		p += "?fieldSelector=" + url.QueryEscape("involvedObject.name="+name)
	}
	var out struct{ Items []Event }
	if err := c.Do(ctx, http.MethodGet, p, "", nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}
