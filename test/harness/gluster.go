package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Gluster is a GlusterFS server of the e2e tests and the demo: glusterd started directly (no
// systemd), in the foreground, in a cgroup of its own (the brick daemons it starts land there
// too), with its working directory, pid file and log under the test's directory, so that
// /var/lib/glusterd keeps no volume (a volume left there is started again by the next
// glusterd); and one volume with one brick on a local directory.
//
// glusterd listens on its fixed port 24007, where mount.glusterfs looks for it: one Gluster
// on the machine at a time.
type Gluster struct {
	dir    string
	volume string
	cg     *Cgroup2
	cmd    *exec.Cmd
	done   chan struct{}
}

// GlusterPrograms are what StartGluster needs (Debian: glusterfs-server, glusterfs-client).
var GlusterPrograms = []string{"glusterd", "gluster", "glusterfsd", "mount.glusterfs"}

// StartGluster starts glusterd under dir/gluster and creates and starts a one-brick volume
// on dir/gluster/brick. On failure it cleans up what it started.
func StartGluster(dir string) (_ *Gluster, err error) {
	g := &Gluster{dir: filepath.Join(dir, "gluster")}
	var b [4]byte
	rand.Read(b[:])
	g.volume = "mk" + hex.EncodeToString(b[:])
	for _, d := range []string{g.dir, g.workDir(), g.Brick()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:24007", time.Second); err == nil {
		c.Close()
		return nil, errors.New("something already listens on glusterd's port 24007 (another glusterd?): stop it first")
	}
	vol, err := os.ReadFile("/etc/glusterfs/glusterd.vol")
	if err != nil {
		return nil, fmt.Errorf("glusterd's volfile (install glusterfs-server): %w", err)
	}
	volfile := filepath.Join(g.dir, "glusterd.vol")
	text := strings.ReplaceAll(string(vol), "/var/lib/glusterd", g.workDir())
	if !strings.Contains(text, g.workDir()) {
		return nil, errors.New("/etc/glusterfs/glusterd.vol names no working-directory /var/lib/glusterd to replace")
	}
	if err := os.WriteFile(volfile, []byte(text), 0o644); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			g.Stop()
		}
	}()
	if g.cg, err = NewCgroup2(filepath.Base(dir) + "-glusterd"); err != nil {
		return nil, err
	}
	g.cmd = exec.Command("glusterd", "-N", "-f", volfile, "-p", filepath.Join(g.dir, "glusterd.pid"),
		"-l", g.Log(), "--log-level=INFO")
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := StartInCgroup(g.cmd, g.cg.Dir); err != nil {
		return nil, fmt.Errorf("start glusterd: %w", err)
	}
	g.done = make(chan struct{})
	go func() { g.cmd.Wait(); close(g.done) }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := g.cli("volume", "list"); err == nil {
			break
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("glusterd does not answer: %v\n%s", err, g.tailLog())
		}
	}
	host, _ := os.Hostname()
	if _, err := g.cli("volume", "create", g.volume, host+":"+g.Brick(), "force"); err != nil {
		return nil, err
	}
	if err := g.StartVolume(); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Gluster) workDir() string { return filepath.Join(g.dir, "glusterd") }

// Brick is the directory the volume serves: fill it directly.
func (g *Gluster) Brick() string { return filepath.Join(g.dir, "brick") }

// Volume is the volume's name.
func (g *Gluster) Volume() string { return g.volume }

// Source is the mount source: 127.0.0.1:/<volume>.
func (g *Gluster) Source() string { return "127.0.0.1:/" + g.volume }

// Log is glusterd's log file.
func (g *Gluster) Log() string { return filepath.Join(g.dir, "glusterd.log") }

// ClientLog is a log file for the FUSE client (mount option log-file=), so that the client
// writes nothing under /var/log/glusterfs.
func (g *Gluster) ClientLog() string { return filepath.Join(g.dir, "client.log") }

// StartVolume starts the volume (its brick daemon, glusterfsd) and waits until the brick is
// online.
func (g *Gluster) StartVolume() error {
	if _, err := g.cli("volume", "start", g.volume, "force"); err != nil {
		return err
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if len(g.BrickPids()) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the brick of %s is not online 20s after volume start\n%s", g.volume, g.tailLog())
		}
	}
}

// StopVolume stops the volume: its brick daemon ends, clients get ENOTCONN.
func (g *Gluster) StopVolume() error {
	_, err := g.cli("volume", "stop", g.volume, "force")
	return err
}

// BrickPids are the brick daemons (glusterfsd) serving the volume.
func (g *Gluster) BrickPids() []int {
	var pids []int
	if g.cg == nil {
		return nil
	}
	data, _ := os.ReadFile(filepath.Join(g.cg.Dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(data)) {
		pid, _ := strconv.Atoi(f)
		cmdline, _ := os.ReadFile("/proc/" + f + "/cmdline")
		if strings.HasPrefix(string(cmdline), "/usr/sbin/glusterfsd\x00") || strings.HasPrefix(string(cmdline), "glusterfsd\x00") {
			if strings.Contains(string(cmdline), g.volume) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func (g *Gluster) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "gluster", append([]string{"--mode=script"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("gluster %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (g *Gluster) tailLog() string {
	data, _ := os.ReadFile(g.Log())
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// Stop stops and deletes the volume (the caller unmounts its clients first), ends
// glusterd and the brick daemons (cgroup.kill of their cgroup), and removes the brick's pid
// file and log that glusterd keeps under /var/run/gluster and /var/log/glusterfs. Safe to
// call twice and after a failed start.
func (g *Gluster) Stop() {
	if g.cmd != nil && g.cmd.Process != nil {
		select {
		case <-g.done:
		default:
			g.cli("volume", "stop", g.volume, "force")
			g.cli("volume", "delete", g.volume)
		}
	}
	if g.cg != nil {
		g.cg.Remove()
	}
	if g.done != nil {
		select {
		case <-g.done:
		case <-time.After(10 * time.Second):
		}
	}
	os.RemoveAll(filepath.Join("/var/run/gluster/vols", g.volume))
	brickLog := strings.ReplaceAll(strings.TrimPrefix(g.Brick(), "/"), "/", "-") + ".log"
	os.Remove(filepath.Join("/var/log/glusterfs/bricks", brickLog))
	os.RemoveAll(filepath.Join("/var/lib/glusterd/vols", g.volume)) // only if glusterd ignored its working directory
}
