package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// bindScript binds a host path into the instance's root at the same path; it runs in
// systemd's mount namespace and root, where the host's tree (copied when the namespace was
// made) is at systemdHostRoot. $1 is the bindArg of the path.
const bindScript = `set -eu
b=$1; p=${b#?:}
case $b in
d:*) mkdir -p "$p" ;;
*) mkdir -p "$(dirname "$p")"; [ -e "$p" ] || : > "$p" ;;
esac
mount --bind "` + systemdHostRoot + `$p" "$p"
`

// Bind binds the host path p (a file or directory, absolute, without symlinks, on the host's
// root filesystem or its /tmp) at the same path inside, as StartSystemd's binds, once systemd runs: for
// what is made after its boot (a runtime's instance directory, a kubelet's). Files created in
// a bound directory on either side show on the other; mounts made in it inside stay inside.
func (s *Systemd) Bind(ctx context.Context, p string) error {
	arg, err := bindArg(s.dir, p)
	if err != nil {
		return fmt.Errorf("Bind: %w", err)
	}
	if m, err := mountOf(p); err != nil || (m != "/" && m != "/tmp") {
		return fmt.Errorf("Bind: %s is on the mount at %q (%v): only the host's root filesystem and /tmp are reachable inside after the boot; bind it at boot (SystemdOptions.Binds)", p, m, err)
	}
	s.mu.Lock()
	if s.pid == 0 || s.killed {
		s.mu.Unlock()
		return errors.New("Bind: systemd is not running")
	}
	s.runs.Add(1)
	s.mu.Unlock()
	defer s.runs.Done()
	cmd := exec.CommandContext(ctx, "/usr/bin/nsenter", "-t", strconv.Itoa(s.pid), "-m", "-r", "--",
		"/bin/sh", "-c", bindScript, "mk-systemd-bind", arg)
	cmd.Env = systemdEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bind %s into systemd's root: %w: %s", p, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mountOf is the mount point of the mount that holds p (the longest mount point that is p or
// above it).
func mountOf(p string) (string, error) {
	mounts, err := readMounts()
	if err != nil {
		return "", err
	}
	best := ""
	for _, m := range mounts {
		if (m.mountPoint == "/" || p == m.mountPoint || strings.HasPrefix(p, m.mountPoint+"/")) && len(m.mountPoint) > len(best) {
			best = m.mountPoint
		}
	}
	return best, nil
}

// InstallUnit writes a unit file /etc/systemd/system/<name> inside (on the instance's
// overlay: the host's /etc is untouched) and makes systemd reload its units.
func (s *Systemd) InstallUnit(ctx context.Context, name, text string) error {
	if !handlerName.MatchString(name) || !strings.Contains(name, ".") {
		return fmt.Errorf("InstallUnit: %q is not a unit name", name)
	}
	if _, err := s.RunInput(ctx, text, "sh", "-c", `cat > "/etc/systemd/system/$1"`, "mk-install-unit", name); err != nil {
		return err
	}
	_, err := s.Run(ctx, "systemctl", "daemon-reload")
	return err
}

// systemdServiceTimeout bounds `systemctl start` and `systemctl stop` of a service.
const systemdServiceTimeout = 60 * time.Second

// systemdService is a service unit of a Systemd and its main process, seen from the host: the
// harness's handle on a runtime or kubelet that systemd runs, as on an operator's node. It
// stands for the run of the service it was made for: after a restart by anyone else the main
// process is another one, and exited says so.
type systemdService struct {
	sd   *Systemd
	unit string
	main process // in the host's PID namespace
}

// StartService starts the service unit (`systemctl start`, which for Type=notify waits until
// the service says it is ready) and finds its main process, whose command name is comm, in
// the unit's cgroup.
func (s *Systemd) startService(ctx context.Context, unit, comm string) (*systemdService, error) {
	ctx, cancel := context.WithTimeout(ctx, systemdServiceTimeout)
	defer cancel()
	if _, err := s.Run(ctx, "systemctl", "start", unit); err != nil {
		status, _ := s.Run(ctx, "systemctl", "status", "--no-pager", "--lines=20", unit)
		return nil, fmt.Errorf("%w\n%s", err, status)
	}
	return s.service(ctx, unit, comm)
}

// service finds the main process of the running service unit, whose command name is comm.
func (s *Systemd) service(ctx context.Context, unit, comm string) (*systemdService, error) {
	procs := filepath.Join(s.cgroup, "system.slice", unit, "cgroup.procs")
	var last error
	for {
		data, err := os.ReadFile(procs)
		if err == nil {
			for _, f := range strings.Fields(string(data)) {
				pid, _ := strconv.Atoi(f)
				if p, err := readProcess(pid); err == nil && p.comm == comm {
					return &systemdService{sd: s, unit: unit, main: p}, nil
				}
			}
			err = fmt.Errorf("no process %q in %s", comm, procs)
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("service %s: %w (%v)", unit, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (u *systemdService) exited() bool { return !sameProcess(u.main) }

func (u *systemdService) exitErr() error {
	if !u.exited() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	status, _ := u.sd.Run(ctx, "systemctl", "status", "--no-pager", "--lines=20", u.unit)
	return fmt.Errorf("%s: main process %d is gone:\n%s", u.unit, u.main.pid, status)
}

func (u *systemdService) pid() int { return u.main.pid }

// stop is `systemctl stop`: what the unit's KillMode says, SIGTERM by default; systemd
// itself sends SIGKILL after the unit's stop timeout, shortened here to timeout.
func (u *systemdService) stop(timeout time.Duration) error {
	if u == nil || u.exited() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	if _, err := u.sd.Run(ctx, "systemctl", "stop", u.unit); err != nil {
		return err
	}
	for !u.exited() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: main process %d still runs after systemctl stop", u.unit, u.main.pid)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
