package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Seen is what a probe saw across one bind mount of a running container.
type Seen struct {
	HostToContainer bool // a tmpfs mounted on the host later shows in the container
	ContainerToHost bool // a tmpfs mounted in the container shows on the host
}

// ProbePropagation tests a bind mount of hostDir at ctrDir in a privileged container for
// real: it mounts a tmpfs with a marker file at hostDir/probe-host on the host and reads it in
// the container, then mounts one at ctrDir/probe-ctr in the container and reads it on the
// host. The host-side mounts stay until UnmountAll of a directory above hostDir.
func ProbePropagation(ctx context.Context, cri *Client, ctrID, hostDir, ctrDir string) (Seen, error) {
	var seen Seen
	hostProbe := filepath.Join(hostDir, "probe-host")
	if err := MountTmpfs(hostProbe, "private"); err != nil {
		return seen, err
	}
	if err := os.WriteFile(filepath.Join(hostProbe, "marker"), []byte("host"), 0o644); err != nil {
		return seen, err
	}
	out, _, code, err := cri.Exec(ctx, ctrID, "cat", ctrDir+"/probe-host/marker")
	if err != nil {
		return seen, fmt.Errorf("read the host's probe in the container: %w", err)
	}
	seen.HostToContainer = code == 0 && out == "host"

	if err := os.MkdirAll(filepath.Join(hostDir, "probe-ctr"), 0o755); err != nil {
		return seen, err
	}
	script := fmt.Sprintf("mount -t tmpfs tmpfs %[1]s/probe-ctr && echo container > %[1]s/probe-ctr/marker", ctrDir)
	_, stderr, code, err := cri.Exec(ctx, ctrID, "sh", "-c", script)
	if err != nil || code != 0 {
		return seen, fmt.Errorf("mount a probe in the container at %s/probe-ctr: exit %d: %s %v", ctrDir, code, stderr, err)
	}
	got, err := os.ReadFile(filepath.Join(hostDir, "probe-ctr", "marker"))
	seen.ContainerToHost = err == nil && strings.TrimSpace(string(got)) == "container"
	return seen, nil
}
