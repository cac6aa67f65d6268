package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Execer runs a command in one container and returns its output and exit code; err reports
// only a failed call, not a non-zero exit. Runc.Execer gives one for plain runc; for CRI,
// bind Client.Exec to a container ID.
type Execer func(ctx context.Context, cmd ...string) (stdout, stderr string, exitCode int, err error)

// ProbePropagationWith is ProbePropagation over any way of running a command in the
// container: it mounts a tmpfs with a marker at hostDir/probe-host on the host and reads it in
// the container at ctrDir, then mounts one at ctrDir/probe-ctr in the container and reads it
// on the host. The container needs CAP_SYS_ADMIN. The host-side mounts stay until UnmountAll
// of a directory above hostDir.
//
// ProbePropagation (probe.go) does the same over CRI and can become
// ProbePropagationWith(ctx, cri-bound Execer, hostDir, ctrDir).
func ProbePropagationWith(ctx context.Context, exec Execer, hostDir, ctrDir string) (Seen, error) {
	var seen Seen
	hostProbe := filepath.Join(hostDir, "probe-host")
	if err := MountTmpfs(hostProbe, "private"); err != nil {
		return seen, err
	}
	if err := os.WriteFile(filepath.Join(hostProbe, "marker"), []byte("host"), 0o644); err != nil {
		return seen, err
	}
	out, _, code, err := exec(ctx, "cat", ctrDir+"/probe-host/marker")
	if err != nil {
		return seen, fmt.Errorf("read the host's probe in the container: %w", err)
	}
	seen.HostToContainer = code == 0 && out == "host"

	if err := os.MkdirAll(filepath.Join(hostDir, "probe-ctr"), 0o755); err != nil {
		return seen, err
	}
	script := fmt.Sprintf("mount -t tmpfs tmpfs %[1]s/probe-ctr && echo container > %[1]s/probe-ctr/marker", ctrDir)
	_, stderr, code, err := exec(ctx, "sh", "-c", script)
	if err != nil || code != 0 {
		return seen, fmt.Errorf("mount a probe in the container at %s/probe-ctr: exit %d: %s %v", ctrDir, code, stderr, err)
	}
	got, err := os.ReadFile(filepath.Join(hostDir, "probe-ctr", "marker"))
	seen.ContainerToHost = err == nil && strings.TrimSpace(string(got)) == "container"
	return seen, nil
}
