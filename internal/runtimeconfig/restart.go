package runtimeconfig

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Restarter restarts a runtime's systemd unit.
type Restarter interface {
	Restart(ctx context.Context, unit string) error
}

// Systemd restarts units with systemctl, and waits for the restart to finish (systemctl's own
// behaviour for a unit of type notify, which containerd's and CRI-O's are).
type Systemd struct{}

// Restart runs `systemctl restart unit`.
func (Systemd) Restart(ctx context.Context, unit string) error {
	out, err := exec.CommandContext(ctx, "systemctl", "restart", unit).CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemctl restart %s: %w: %s", unit, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RestartIfNeeded restarts the plan's runtime through r when the plan changed its config, and
// says what it did (or what the operator must do) in a line.
func RestartIfNeeded(ctx context.Context, p Plan, r Restarter, restart bool) (string, error) {
	switch {
	case !p.RestartNeeded():
		return "", nil
	case !restart:
		return fmt.Sprintf("restart needed: %s reads its config only at start: run `systemctl restart %s` (or this command with --restart)", p.Options.Runtime, p.Options.Unit()), nil
	}
	if err := r.Restart(ctx, p.Options.Unit()); err != nil {
		return "", err
	}
	return fmt.Sprintf("restarted %s (systemctl restart %s)", p.Options.Runtime, p.Options.Unit()), nil
}

// unitDirs are where systemd finds unit files.
var unitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// UnitFileExists says whether the node has a unit file for unit (a distribution's Units).
func UnitFileExists(unit string) bool {
	for _, d := range unitDirs {
		if _, err := os.Stat(filepath.Join(d, unit+".service")); err == nil {
			return true
		}
	}
	return false
}

// PathExists says whether path exists on the node (a distribution's Marker).
func PathExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
