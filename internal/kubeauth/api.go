package kubeauth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
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
type APIReviewer struct{ c *Client }

// NewAPIReviewer asks server (https://host:port), trusting the CA in caFile, with the bearer
// token in tokenFile, read at every call (kubelet rotates a projected ServiceAccount token).
func NewAPIReviewer(server, tokenFile, caFile string) (*APIReviewer, error) {
	c, err := NewClient(server, tokenFile, caFile)
	if err != nil {
		return nil, err
	}
	return &APIReviewer{c}, nil
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
	err := a.c.Do(ctx, http.MethodPost, path, body, out)
	var status *StatusError
	if errors.As(err, &status) {
		return fmt.Errorf("%w (does the agent's ServiceAccount have deploy/rbac.yaml's rights?)", err)
	}
	return err
}
