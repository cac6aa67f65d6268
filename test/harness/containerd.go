package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const (
	// readyTimeout bounds the wait for CRI after (re)starting containerd.
	readyTimeout = 60 * time.Second
	// stopTimeout is how long containerd gets to shut down after SIGTERM before SIGKILL.
	stopTimeout = 15 * time.Second
)

// Containerd is one running instance. Its methods are safe for concurrent use.
type Containerd struct{ instance }

// Start creates an instance directory under /tmp, starts containerd there, waits until CRI
// answers and imports BusyboxImage and PauseImage.
//
// On failure Start cleans up after itself and returns the error together with the (closed)
// instance, so that `defer c.Close()` placed before the error check is harmless; Close also
// accepts a nil *Containerd.
func Start(ctx context.Context, opts Options) (*Containerd, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	sweepStale()
	dir, err := os.MkdirTemp(instanceParent, instanceDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("create instance directory in %s: %w", instanceParent, err)
	}
	c := &Containerd{instance{opts: opts, layout: layout{dir: dir}}}
	if err := c.start(ctx); err != nil {
		return c, errors.Join(err, c.Close())
	}
	return c, nil
}

func (c *Containerd) start(ctx context.Context) error {
	l := c.layout
	if err := writeOwner(l); err != nil {
		return err
	}
	if err := writeConfig(l, c.opts); err != nil {
		return err
	}
	if sd := c.opts.Systemd; sd != nil {
		if err := sd.Bind(ctx, l.dir); err != nil {
			return err
		}
		if err := sd.InstallUnit(ctx, ContainerdUnit, containerdUnit(c.opts.BinDir, l)); err != nil {
			return err
		}
	}
	log, err := openLogSink(l.log(), c.opts.Log)
	if err != nil {
		return err
	}
	c.log = log
	if c.cri, err = newClient(l.socket(), l.cgroupParent(), l.podLogs()); err != nil {
		return err
	}

	// Building the images (cold: a go build) overlaps with containerd's start-up.
	type result struct {
		path string
		err  error
	}
	archive := make(chan result, 1)
	go func() {
		p, err := imageArchive(ctx, l.dir)
		archive <- result{p, err}
	}()
	startErr := c.startDaemon(ctx)
	a := <-archive
	if err := errors.Join(startErr, a.err); err != nil {
		return err
	}
	if err := importImages(ctx, c.opts.BinDir, l.socket(), a.path); err != nil {
		return err
	}
	return c.waitImages(ctx, BusyboxImage, PauseImage)
}

// waitImages waits until CRI lists the imported images refs: its image store follows
// containerd's events, so it can lag behind ctr for a moment.
func (c *Containerd) waitImages(ctx context.Context, refs ...string) error {
	return poll(ctx, readyTimeout, func(ctx context.Context) error {
		for _, ref := range refs {
			ok, err := c.cri.hasImage(ctx, ref)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("CRI does not list image %s", ref)
			}
		}
		return nil
	})
}

// Dir is the instance directory; everything the instance creates on disk is below it.
func (c *Containerd) Dir() string { return c.layout.dir }

// NRISocket is where NRI plugins connect; empty unless Options.NRI is set.
func (c *Containerd) NRISocket() string {
	if !c.opts.NRI {
		return ""
	}
	return c.layout.nriSocket()
}

// Name is KindContainerd.
func (c *Containerd) Name() string { return string(KindContainerd) }

// NRIPluginPath is containerd's plugin_path (pre-registered plugins).
func (c *Containerd) NRIPluginPath() string {
	return cmp.Or(c.opts.NRIPluginPath, c.layout.nriPlugins())
}

// NRIPluginConfigPath is containerd's plugin_config_path.
func (c *Containerd) NRIPluginConfigPath() string {
	return cmp.Or(c.opts.NRIPluginConfigPath, c.layout.nriPluginConf())
}

// LogPath is the file that collects containerd's output (until Close removes Dir()).
func (c *Containerd) LogPath() string { return c.layout.log() }

// Socket is containerd's gRPC socket (for ctr -a, or a containerd client).
func (c *Containerd) Socket() string { return c.layout.socket() }

// ConfigPath is the instance's config.toml; a test may change it and Restart.
func (c *Containerd) ConfigPath() string { return c.layout.config() }

// CRI returns the instance's CRI client; it stays valid across Restart.
func (c *Containerd) CRI() *Client { return c.cri }

// Start starts containerd again after Stop and waits until CRI is ready.
func (c *Containerd) Start(ctx context.Context) error { return c.startDaemon(ctx) }

// Restart stops containerd with SIGTERM and starts it again with the same config, as an
// upgrade or crash-restart would. Shims and containers keep running; pods, containers and
// images are still there afterwards.
func (c *Containerd) Restart(ctx context.Context) error {
	if err := c.Stop(); err != nil {
		return err
	}
	return c.Start(ctx)
}

// startDaemon starts containerd and waits until CRI is ready.
func (c *Containerd) startDaemon(ctx context.Context) error {
	var d runtimeDaemon
	var err error
	if sd := c.opts.Systemd; sd != nil {
		d, err = sd.startService(ctx, ContainerdUnit, containerdBin)
	} else {
		d, err = startDaemon(c.opts.BinDir, c.layout.config(), c.opts.Network, c.log)
	}
	if err != nil {
		return err
	}
	c.setDaemon(d)
	return waitReady(ctx, "containerd", c.layout.config(), c.layout.log(), d, c.cri)
}

// ContainerdUnit is the service that runs containerd on a node with Options.Systemd, as on
// an operator's node: `systemctl restart containerd` inside restarts it.
const ContainerdUnit = "containerd.service"

// containerdUnit is the unit file of ContainerdUnit: containerd's own (containerd.service in
// its repository) without what needs CAP_SYS_RESOURCE here (OOMScoreAdjust, raised limits)
// and without Restart=always, so that a crash fails the test instead of hiding in a restart.
// Delegate and KillMode=process: containerd manages the cgroups below it, and a restart keeps
// the shims and their containers.
func containerdUnit(binDir string, l layout) string {
	return fmt.Sprintf(`[Unit]
Description=containerd of the mountkeeper test instance %[1]s
After=dbus.service

[Service]
Type=notify
Environment=PATH=%[2]s:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart=%[3]s --config %[4]s
Delegate=yes
KillMode=process
TimeoutStopSec=%[5]d
StandardOutput=append:%[6]s
StandardError=inherit
`, l.dir, binDir, filepath.Join(binDir, containerdBin), l.config(), int(stopTimeout.Seconds()), l.log())
}

// Reattach finds containerd again after something else restarted its service (`systemctl
// restart containerd`, `mountkeeper runtime configure --restart`) on a node with
// Options.Systemd, and waits until CRI is ready.
func (c *Containerd) Reattach(ctx context.Context) error {
	sd := c.opts.Systemd
	if sd == nil {
		return errors.New("Reattach: containerd does not run as a systemd service (Options.Systemd)")
	}
	ctx2, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	d, err := sd.service(ctx2, ContainerdUnit, containerdBin)
	if err != nil {
		return err
	}
	c.setDaemon(d)
	return waitReady(ctx, "containerd", c.layout.config(), c.layout.log(), d, c.cri)
}

// runtimeDaemon is a running containerd or crio: a process the harness started (daemon) or
// a service systemd runs (systemdService).
type runtimeDaemon interface {
	exited() bool
	exitErr() error // why it exited, once it has
	pid() int       // in the host's PID namespace
	// stop stops it with SIGTERM, and SIGKILL after timeout.
	stop(timeout time.Duration) error
}

// waitReady waits until the daemon d (containerd or crio, started on config) answers CRI, or
// says why not with the end of its log.
func waitReady(ctx context.Context, name, config, log string, d runtimeDaemon, cri *Client) error {
	err := poll(ctx, readyTimeout, func(ctx context.Context) error {
		if d.exited() {
			return errPollStop{fmt.Errorf("%s exited: %v", name, d.exitErr())}
		}
		return cri.ready(ctx)
	})
	if err != nil {
		return fmt.Errorf("%s (%s) did not become ready: %w\n%s", name, config, err, tail(log, 30))
	}
	return nil
}

// daemon is one containerd process.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been reaped
	err  error         // Wait's result, valid after done
}

// startDaemon runs containerd with config (in network, unless nil), its output going to
// log. PATH gets binDir first so that anything containerd looks up by name (the shim) comes
// from there.
func startDaemon(binDir, config string, network *NodeNetwork, log *logSink) (*daemon, error) {
	cmd := exec.Command(filepath.Join(binDir, containerdBin), "--config", config)
	if network != nil {
		cmd = network.Command(filepath.Join(binDir, containerdBin), "--config", config)
	}
	cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return startLogged(cmd, log)
}

// startLogged starts cmd (a runtime daemon) with its output going to log.
func startLogged(cmd *exec.Cmd, log *logSink) (*daemon, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe for %s output: %w", filepath.Base(cmd.Path), err)
	}
	// An *os.File (not an io.Writer) so that exec does not wait for the pipe to close: shims
	// or NRI plugins that inherit it could keep it open long after containerd is gone.
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go log.copyFrom(r)
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

func (d *daemon) exitErr() error { return d.err }

func (d *daemon) pid() int { return d.cmd.Process.Pid }

func (d *daemon) name() string { return filepath.Base(d.cmd.Path) }

// stop sends SIGTERM, and SIGKILL if containerd is still running after timeout. A nil
// daemon is already stopped.
func (d *daemon) stop(timeout time.Duration) error {
	if d == nil || d.exited() {
		return nil
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGTERM %s %d: %w", d.name(), d.pid(), err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(timeout):
	}
	_ = d.cmd.Process.Kill()
	<-d.done
	return fmt.Errorf("%s %d ignored SIGTERM for %v and was killed", d.name(), d.pid(), timeout)
}

// errPollStop makes poll give up at once instead of retrying.
type errPollStop struct{ error }

// poll calls try until it succeeds, returns errPollStop, ctx ends or timeout passes. Each
// attempt gets a short deadline so one hung call cannot eat the whole timeout.
func poll(ctx context.Context, timeout time.Duration, try func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		err := try(attempt)
		cancelAttempt()
		var stop errPollStop
		switch {
		case err == nil:
			return nil
		case errors.As(err, &stop):
			return stop.error
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string { return tailMatching(path, "", n) }

// tailMatching returns the last n lines of the file at path that contain substr (all lines
// when substr is ""), headed by the path, for error messages.
func tailMatching(path, substr string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no %s: %v)", path, err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if strings.Contains(l, substr) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	head := path
	if substr != "" {
		head = fmt.Sprintf("%s, last lines with %q", path, substr)
	}
	return head + ":\n" + strings.Join(lines, "\n")
}

// TaskSpec is the OCI spec (config.json) containerd gave the runtime for container id, read
// from its task's bundle: the container must have been started.
func (c *Containerd) TaskSpec(id string) ([]byte, error) {
	return os.ReadFile(filepath.Join(c.layout.path("state"), "io.containerd.runtime.v2.task", "k8s.io", id, "config.json"))
}
