package harness

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// Runc drives the harness's runc binary directly, with a private state root, for tests of
// OCI hooks under plain runc (no containerd). Create one with NewRunc and Close it.
type Runc struct {
	Bin  string // the runc binary
	Root string // runc --root: its state directory
}

// RuncBinary is the runc the harness uses: $MOUNTKEEPER_BIN/runc, else
// $MOUNTKEEPER_CACHE/bin/runc, else /var/cache/mountkeeper-test/bin/runc.
func RuncBinary() string {
	return filepath.Join(cmp.Or(os.Getenv("MOUNTKEEPER_BIN"), filepath.Join(cacheDir(), "bin")), runcBin)
}

// NewRunc returns a Runc whose state lives in root (created). It fails with a hint when the
// binary is missing.
func NewRunc(root string) (*Runc, error) {
	bin := RuncBinary()
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("runc binary %s: %w (run test/tools/install.sh)", bin, err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	return &Runc{Bin: bin, Root: root}, nil
}

func (r *Runc) command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, r.Bin, append([]string{"--root", r.Root}, args...)...)
}

// Spec returns the config.json `runc spec` writes, as a starting point for a bundle.
func (r *Runc) Spec(ctx context.Context) (*oci.Spec, error) {
	dir, err := os.MkdirTemp("", "mk-runc-spec-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if out, err := r.command(ctx, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc spec: %w: %s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec oci.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("parse the config.json of runc spec: %w", err)
	}
	return &spec, nil
}

// WriteSpec writes spec as bundle/config.json.
func WriteSpec(bundle string, spec *oci.Spec) error {
	data, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644)
}

// Run starts the container of bundle detached (`runc run -d`). The container's stdio goes
// to /dev/null. The error holds runc's stderr, where runc reports a failed hook with the
// hook's own stderr.
func (r *Runc) Run(ctx context.Context, id, bundle string) error {
	return r.run(ctx, "run", "-d", "--bundle", bundle, id)
}

// RunForeground runs the container of bundle to its end (`runc run`, which deletes it
// afterwards), for a process such as `true`.
func (r *Runc) RunForeground(ctx context.Context, id, bundle string) error {
	return r.run(ctx, "run", "--bundle", bundle, id)
}

func (r *Runc) run(ctx context.Context, args ...string) error {
	// A file, not a pipe, for runc's output: a detached container inherits it, and a pipe
	// would keep Wait waiting for the container to exit.
	out, err := os.CreateTemp("", "mk-runc-out-")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := r.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(out.Name())
		return fmt.Errorf("runc %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(msg))
	}
	return nil
}

// Exec runs cmd in a running container and returns its output and exit code; err reports
// only a failed call. It has the signature of an Execer once the container is bound.
func (r *Runc) Exec(ctx context.Context, id string, cmd ...string) (stdout, stderr string, exitCode int, err error) {
	ctx, cancel := context.WithTimeout(ctx, defaultExecTimeout)
	defer cancel()
	var o, e bytes.Buffer
	c := r.command(ctx, append([]string{"exec", id}, cmd...)...)
	c.Stdout, c.Stderr = &o, &e
	err = c.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && ctx.Err() == nil {
		return o.String(), e.String(), exit.ExitCode(), nil
	}
	if err != nil {
		return o.String(), e.String(), -1, fmt.Errorf("runc exec %s %v: %w: %s", id, cmd, err, e.String())
	}
	return o.String(), e.String(), 0, nil
}

// Execer binds Exec to one container.
func (r *Runc) Execer(id string) Execer {
	return func(ctx context.Context, cmd ...string) (string, string, int, error) { return r.Exec(ctx, id, cmd...) }
}

// Pid returns the host pid of a running container's init process.
func (r *Runc) Pid(ctx context.Context, id string) (int, error) {
	out, err := r.command(ctx, "state", id).Output()
	if err != nil {
		return 0, fmt.Errorf("runc state %s: %w", id, err)
	}
	var st oci.State
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("parse runc state %s: %w", id, err)
	}
	return st.Pid, nil
}

// Delete kills and deletes a container; a container that does not exist is no error.
func (r *Runc) Delete(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := r.command(ctx, "delete", "--force", id).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "does not exist") {
		return fmt.Errorf("runc delete %s: %w: %s", id, err, out)
	}
	return nil
}

// Close deletes every container in the state root, then the root. It is safe to call twice.
func (r *Runc) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if out, err := r.command(ctx, "list", "--quiet").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			errs = append(errs, r.Delete(id))
		}
	} else if _, serr := os.Stat(r.Root); serr == nil {
		errs = append(errs, fmt.Errorf("runc list: %w", err))
	}
	errs = append(errs, os.RemoveAll(r.Root))
	return errors.Join(errs...)
}

// BusyboxRootfs writes the files of BusyboxImage (busybox-static and a symlink per applet)
// into dir, for a bundle that runc runs without containerd.
func BusyboxRootfs(dir string) error {
	bb, err := loadBusybox()
	if err != nil {
		return err
	}
	for _, e := range bb.image().files {
		p := filepath.Join(dir, e.name)
		switch e.typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			err = os.Chmod(p, os.FileMode(e.mode&0o777)|sticky(e.mode))
		case tar.TypeSymlink:
			err = os.Symlink(e.linkname, p)
		default:
			if err = os.WriteFile(p, e.data, 0o644); err == nil {
				err = os.Chmod(p, os.FileMode(e.mode&0o777))
			}
		}
		if err != nil {
			return fmt.Errorf("busybox rootfs: %w", err)
		}
	}
	return nil
}

// sticky keeps the sticky bit of a tar mode (for /tmp).
func sticky(mode int64) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}
