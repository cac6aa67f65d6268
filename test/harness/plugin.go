package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildMountkeeper builds cmd/mountkeeper into dir and returns the binary's path. It uses
// $MOUNTKEEPER_BINARY instead when set, so `make` can hand over the binary it built.
func BuildMountkeeper(dir string) (string, error) {
	return build(dir, "MOUNTKEEPER_BINARY", "mountkeeper")
}

// BuildMountkeeperVersion builds cmd/mountkeeper into dir/mountkeeper stamped with version, as
// the Makefile's LDFLAGS stamp `git describe`: two builds of one tree with two stamps are two
// versions of the agent (a rolling update's before and after), each saying its version in its
// first log line. It ignores $MOUNTKEEPER_BINARY, which has one stamp.
func BuildMountkeeperVersion(dir, version string) (string, error) {
	out := filepath.Join(dir, "mountkeeper")
	return out, goBuildFlags(out, "mountkeeper", []string{"-ldflags=-X main.version=" + version})
}

// BuildHook builds cmd/mountkeeper-hook into dir, or returns $MOUNTKEEPER_HOOK_BINARY when
// set (make test builds it once).
func BuildHook(dir string) (string, error) {
	return build(dir, "MOUNTKEEPER_HOOK_BINARY", "mountkeeper-hook")
}

// BuildRuntimeWrapper builds cmd/mountkeeper-runtime into dir, or returns
// $MOUNTKEEPER_RUNTIME_BINARY when set (make test builds it once).
func BuildRuntimeWrapper(dir string) (string, error) {
	return build(dir, "MOUNTKEEPER_RUNTIME_BINARY", "mountkeeper-runtime")
}

// build builds ./cmd/<name> as the Makefile does (no cgo: static, as the agent image needs)
// into dir, unless the environment variable env names a binary built already.
func build(dir, env, name string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	out := filepath.Join(dir, name)
	return out, goBuild(out, name)
}

// BuildFor cross-builds ./cmd/<name> for linux/arch (GOARCH) into dir/linux_<arch>/<name>,
// static, as `make image` does, and returns its path.
func BuildFor(dir, arch, name string) (string, error) {
	out := filepath.Join(dir, "linux_"+arch, name)
	return out, goBuild(out, name, "GOOS=linux", "GOARCH="+arch)
}

// goBuild builds ./cmd/<name> with cgo off and env added into out.
func goBuild(out, name string, env ...string) error {
	return goBuildFlags(out, name, nil, env...)
}

// goBuildFlags is goBuild with flags added to go build's.
func goBuildFlags(out, name string, flags []string, env ...string) error {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), "./cmd/"+name)...)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s go build ./cmd/%s: %w: %s", strings.Join(env, " "), name, err, b)
	}
	return nil
}

// Plugin is a `mountkeeper nri` process connected to an instance's NRI socket.
type Plugin struct {
	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan struct{}
}

// PluginOptions say how to start the plugin.
type PluginOptions struct {
	Binary string   // from BuildMountkeeper
	Config string   // --config; "" starts the plugin without it (default path, else embedded default)
	Socket string   // --socket, usually Containerd.NRISocket()
	Args   []string // extra flags
	Log    io.Writer
	// Cgroup, a cgroup2 directory, is where the plugin starts (placed there at clone time),
	// so a test can kill the plugin's whole cgroup as a supervisor would.
	Cgroup string
}

// StartPlugin starts `mountkeeper nri` and waits until the runtime has configured it.
func StartPlugin(ctx context.Context, o PluginOptions) (*Plugin, error) {
	args := []string{"nri", "--socket", o.Socket, "--log-level", "debug"}
	if o.Config != "" {
		args = append(args, "--config", o.Config)
	}
	args = append(args, o.Args...)
	cmd := exec.Command(o.Binary, args...)
	buf := &lockedBuffer{}
	var w io.Writer = buf
	if o.Log != nil {
		w = io.MultiWriter(buf, o.Log)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := cmd.Start
	if o.Cgroup != "" {
		start = func() error { return StartInCgroup(cmd, o.Cgroup) }
	}
	if err := start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Binary, err)
	}
	p := &Plugin{cmd: cmd, log: buf, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	if err := p.WaitLog(ctx, "connected to", 1, 30*time.Second); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// WaitLog waits until the plugin's log holds substr at least n times.
func (p *Plugin) WaitLog(ctx context.Context, substr string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if strings.Count(p.log.String(), substr) >= n {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("plugin exited (%v) before logging %q %d times; log:\n%s", p.cmd.ProcessState, substr, n, p.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("plugin did not log %q %d times within %s; log:\n%s", substr, n, timeout, p.log)
		}
	}
}

// Exited reports whether the plugin process has ended.
func (p *Plugin) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Pid is the plugin process's pid.
func (p *Plugin) Pid() int { return p.cmd.Process.Pid }

// Log returns what the plugin logged so far.
func (p *Plugin) Log() string { return p.log.String() }

// Signal sends sig to the plugin (SIGHUP: reload its config).
func (p *Plugin) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop ends the plugin (SIGTERM, then SIGKILL after 5s). Safe to call twice.
func (p *Plugin) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
