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

// RestartMode is how configure and unconfigure restart the runtime once its config changed.
type RestartMode string

const (
	// RestartNone restarts nothing and says what the operator must run.
	RestartNone RestartMode = "none"
	// RestartSystemd restarts the distribution's unit (Distribution.Units; CRI-O: crio) with
	// systemctl.
	RestartSystemd RestartMode = "systemd"
)

// ParseRestartMode is the mode named s: none, systemd, or the bool forms of the earlier
// --restart flag (true: systemd, false: none).
func ParseRestartMode(s string) (RestartMode, error) {
	switch s {
	case "none", "false":
		return RestartNone, nil
	case "systemd", "true", "":
		return RestartSystemd, nil
	}
	return "", fmt.Errorf("--restart %q: none (print what to restart) or systemd (systemctl restart the distribution's unit)", s)
}

// RestartUnit is the systemd unit that restarts runtime on a node of distribution d: CRI-O's
// own (crio) or the first of d's units whose unit file is there (unitExists): containerd,
// k3s or k3s-agent, rke2-server or rke2-agent, snap.microk8s.daemon-containerd.
func RestartUnit(runtime string, d Distribution, unitExists func(unit string) bool) string {
	if runtime == "crio" {
		return CRIOUnit
	}
	return d.Unit(unitExists)
}

// CRIOUnit is CRI-O's systemd unit on every distribution that ships it (OpenShift too).
const CRIOUnit = "crio"

// RestartIfNeeded restarts the plan's runtime through r when the plan changed its config and
// mode is RestartSystemd, and says what it did (or what the operator must do) in a line.
func RestartIfNeeded(ctx context.Context, p Plan, r Restarter, mode RestartMode) (string, error) {
	switch {
	case !p.RestartNeeded():
		return "", nil
	case mode != RestartSystemd:
		return fmt.Sprintf("restart needed: %s reads its config only at start: run `systemctl restart %s` on this node (or this command with --restart=systemd); until then the node is not labelled for the new classes and their pods stay Pending", p.Options.Runtime, p.Options.Unit()), nil
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
