package runtimeconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// EffectiveConfig reads the config the runtime would run with: what it makes of its files
// (migrations, imports, drop-ins, built-in defaults), in its own words.
type EffectiveConfig interface {
	// Read returns the runtime's effective config as TOML; ErrNoRuntimeCommand when the
	// runtime's binary is not there to ask.
	Read(o Options) ([]byte, error)
}

// ErrNoRuntimeCommand: the runtime's binary was not found.
var ErrNoRuntimeCommand = errors.New("runtime binary not found")

// dumpTimeout bounds the runtime's config command: it only reads files.
const dumpTimeout = 30 * time.Second

// RuntimeCommand asks the runtime's own binary, in this process's mount namespace (the host's,
// with --host-namespaces): `containerd --config FILE config dump`, `crio --config FILE
// --config-dir DIR config`. Binary "" is the runtime's name, looked up on PATH.
type RuntimeCommand struct {
	Binary string
}

// Read runs the runtime's config command.
func (r RuntimeCommand) Read(o Options) ([]byte, error) {
	bin := r.Binary
	if bin == "" {
		bin = o.Runtime
	}
	var args []string
	switch o.Runtime {
	case "containerd":
		args = []string{"--config", o.ConfigFile, "config", "dump"}
	case "crio":
		args = []string{"--config", o.ConfigFile, "--config-dir", o.ConfigDir, "config"}
	default:
		return nil, fmt.Errorf("runtime %q: containerd or crio", o.Runtime)
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoRuntimeCommand, bin, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dumpTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", path, strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	return stdout.Bytes(), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
