package netmount

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"
)

// Job is one command to run in a scope of its own.
type Job struct {
	// Unit names the scope, one per mount: "mount-<key>".
	Unit string
	// Description is for people (a systemd unit's description); it must hold no secret.
	Description string
	// Argv is the command; Argv[0] is an absolute path.
	Argv []string
	// Env is the command's environment; nil means the agent's, with a standard PATH added if
	// it has none (NRI starts plugins without PATH, and mount.fuse finds the FUSE program by it).
	Env []string
	// Stdout and Stderr receive the command's output. They are files, not pipes: a FUSE daemon
	// and its ssh keep them open after the helper exits, so a pipe would neither reach EOF
	// (Wait would hang) nor survive being closed (the daemon would get SIGPIPE).
	Stdout, Stderr *os.File
}

// unitFor names the scope of the mount with key.
func unitFor(key string) string { return "mount-" + key }

// Scoper runs a mount helper so that the mount, and a FUSE daemon it forks, lives in a scope
// of its own, not in the agent's cgroup: killing or restarting the agent, even killing its
// whole cgroup (cgroup.kill), leaves the filesystem and its daemon alive.
type Scoper interface {
	// Name is "systemd" or "cgroup", for `mountkeeper check` and logs.
	Name() string
	// Start starts job.Argv in the scope job.Unit, in a new session, and returns the running
	// command for the caller to Wait on. If ctx is done first, the command's whole process
	// group is killed (a FUSE daemon that already detached into its own session survives).
	Start(ctx context.Context, job Job) (*exec.Cmd, error)
	// Remove cleans up after the scope of unit once its filesystem is unmounted (removes an
	// empty cgroup). It fails while something still runs in the scope.
	Remove(unit string) error
}

// DetectScoper picks the scope mechanism the way kubelet does: a transient systemd scope when
// systemd is PID 1 (/run/systemd/system exists and /proc/1/comm is "systemd"), else a cgroup
// of its own under the cgroup2 root (/sys/fs/cgroup if it is cgroup2, else
// /sys/fs/cgroup/unified on a hybrid host). It fails when there is neither.
func DetectScoper() (Scoper, error) { return detectScoper(liveProbe{}) }

// probe is what DetectScoper reads of the node.
type probe interface {
	exists(path string) bool
	readFile(path string) ([]byte, error)
}

type liveProbe struct{}

func (liveProbe) exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (liveProbe) readFile(path string) ([]byte, error) { return os.ReadFile(path) }

func detectScoper(p probe) (Scoper, error) {
	if comm, err := p.readFile("/proc/1/comm"); err == nil && p.exists("/run/systemd/system") &&
		strings.TrimSpace(string(comm)) == "systemd" {
		run, err := lookPath("systemd-run")
		if err != nil {
			return nil, fmt.Errorf("systemd is PID 1 but systemd-run is missing (install systemd): %w", err)
		}
		return &SystemdScoper{Run: run}, nil
	}
	mi, err := p.readFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("find the cgroup2 mount: %w", err)
	}
	root, err := cgroup2Root(mi)
	if err != nil {
		return nil, err
	}
	return NewCgroupScoper(root), nil
}

// cgroup2Root finds the cgroup2 mount in mountinfo: /sys/fs/cgroup (unified hierarchy) first,
// then /sys/fs/cgroup/unified (hybrid), then any.
func cgroup2Root(mi []byte) (string, error) {
	infos, err := mountinfo.GetMountsFromReader(bytes.NewReader(mi), func(i *mountinfo.Info) (skip, stop bool) {
		return i.FSType != "cgroup2", false
	})
	if err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	for _, want := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		for _, i := range infos {
			if i.Mountpoint == want {
				return want, nil
			}
		}
	}
	if len(infos) > 0 {
		return infos[0].Mountpoint, nil
	}
	return "", errors.New("systemd is not PID 1 and no cgroup2 filesystem is mounted: a network mount cannot get a scope of its own (mount cgroup2, e.g. at /sys/fs/cgroup/unified)")
}

// sessionCommand makes a command that runs in a new session (so it has no controlling terminal
// and its own process group) and whose process group is killed when ctx is done.
func sessionCommand(ctx context.Context, job Job) (*exec.Cmd, error) {
	if len(job.Argv) == 0 {
		return nil, errors.New("empty command")
	}
	cmd := exec.CommandContext(ctx, job.Argv[0], job.Argv[1:]...)
	cmd.Env = job.Env
	if cmd.Env == nil {
		cmd.Env = withPath(os.Environ())
	}
	cmd.Stdout, cmd.Stderr = job.Stdout, job.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error {
		// Setsid made the helper a process group leader: its pgid is its pid.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return cmd, nil
}

const standardPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func withPath(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") && kv != "PATH=" {
			return env
		}
	}
	return append(env, standardPath)
}
