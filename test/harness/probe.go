package harness

import (
	"context"
)

// Seen is what a probe saw across one bind mount of a running container.
type Seen struct {
	HostToContainer bool // a tmpfs mounted on the host later shows in the container
	ContainerToHost bool // a tmpfs mounted in the container shows on the host
}

// ProbePropagation is ProbePropagationWith over the CRI: it tests a bind mount of hostDir at
// ctrDir in a privileged container for real, in both directions.
func ProbePropagation(ctx context.Context, cri *Client, ctrID, hostDir, ctrDir string) (Seen, error) {
	return ProbePropagationWith(ctx, func(ctx context.Context, cmd ...string) (string, string, int, error) {
		return cri.Exec(ctx, ctrID, cmd...)
	}, hostDir, ctrDir)
}
