package nodelabel

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Handlers says which runtime handlers the running runtime has loaded.
type Handlers interface {
	Handlers(ctx context.Context) ([]string, error)
}

// CRI asks the runtime's CRI socket: the handlers of the daemon that runs, not those of a
// config file it may not have read yet.
type CRI struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
}

// NewCRI connects (lazily: gRPC dials at the first call and again after the runtime restarts)
// to the CRI socket at path.
func NewCRI(path string) (*CRI, error) {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("CRI socket %s: %w", path, err)
	}
	return &CRI{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *CRI) Close() error { return c.conn.Close() }

// Handlers is the Status response's runtime_handlers (containerd 2.0 and CRI-O 1.30 on).
// From a runtime that leaves it empty (containerd 1.7), the runtimes of the CRI config that
// the verbose status shows, which is the daemon's config in memory too.
func (c *CRI) Handlers(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("CRI Status: %w", err)
	}
	var out []string
	for _, h := range resp.GetRuntimeHandlers() {
		if h.GetName() != "" {
			out = append(out, h.GetName())
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	return verboseRuntimes(resp.GetInfo()["config"]), nil
}

// verboseRuntimes are the runtime names in containerd's verbose CRI status config
// ({"containerd": {"runtimes": {NAME: ...}}}), none when it has no such thing.
func verboseRuntimes(config string) []string {
	var c struct {
		Containerd struct {
			Runtimes map[string]json.RawMessage `json:"runtimes"`
		} `json:"containerd"`
	}
	if json.Unmarshal([]byte(config), &c) != nil {
		return nil
	}
	var out []string
	for name := range c.Containerd.Runtimes {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
