package netmount

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"
)

// SystemdScoper runs the helper in a transient systemd scope unit, as kubelet does:
// systemd-run --scope --unit=mountkeeper-<unit>-<suffix> --collect -- mount ...
// systemd-run moves itself into the new scope, then execs the helper; the scope stays as long
// as a process (a FUSE daemon) runs in it, whatever happens to the agent's service, and
// --collect has systemd drop it once it is empty, even after a failure.
type SystemdScoper struct {
	Run string // path of systemd-run
}

var _ Scoper = (*SystemdScoper)(nil)

// Name implements Scoper.
func (s *SystemdScoper) Name() string { return "systemd" }

// UnitName is the scope unit for unit. A suffix makes it unique: a FUSE daemon of an earlier
// mount that was unmounted lazily may keep its scope alive after the unmount, and systemd
// refuses a second unit of the same name.
func (s *SystemdScoper) UnitName(unit string) string {
	return "mountkeeper-" + unit + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".scope"
}

// Command is the systemd-run command line for job.
func (s *SystemdScoper) Command(job Job) []string {
	argv := []string{s.Run, "--scope", "--unit=" + s.UnitName(job.Unit), "--description=" + job.Description,
		"--collect", "--quiet", "--"}
	return append(argv, job.Argv...)
}

// Start implements Scoper.
func (s *SystemdScoper) Start(ctx context.Context, job Job) (*exec.Cmd, error) {
	job.Argv = s.Command(job)
	cmd, err := sessionCommand(ctx, job)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Run, err)
	}
	return cmd, nil
}

// Remove implements Scoper: systemd collects an empty scope by itself.
func (s *SystemdScoper) Remove(string) error { return nil }
