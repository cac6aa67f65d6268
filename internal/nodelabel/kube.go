package nodelabel

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/kubeauth"
)

// Nodes reads and patches nodes' labels.
type Nodes interface {
	Labels(ctx context.Context, node string) (map[string]string, error)
	PatchLabels(ctx context.Context, node string, patch map[string]any) error
	List(ctx context.Context) (map[string]map[string]string, error)
}

// API is Nodes through the API server, each call bounded.
type API struct{ C *kubeauth.Client }

const callTimeout = 10 * time.Second

type nodeObject struct {
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

// Labels are node's labels.
func (a API) Labels(ctx context.Context, node string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var n nodeObject
	err := a.C.Do(ctx, http.MethodGet, "/api/v1/nodes/"+url.PathEscape(node), nil, &n)
	return n.Metadata.Labels, err
}

// PatchLabels merge-patches node's labels.
func (a API) PatchLabels(ctx context.Context, node string, patch map[string]any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return a.C.MergePatch(ctx, "/api/v1/nodes/"+url.PathEscape(node), map[string]any{"metadata": map[string]any{"labels": patch}}, nil)
}

// List is every node's labels, by node.
func (a API) List(ctx context.Context) (map[string]map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var list struct{ Items []nodeObject }
	if err := a.C.Do(ctx, http.MethodGet, "/api/v1/nodes", nil, &list); err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, n := range list.Items {
		out[n.Metadata.Name] = n.Metadata.Labels
	}
	return out, nil
}
