package netmount

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultCgroupParent holds the cgroups of the mounts, under the cgroup2 root.
const DefaultCgroupParent = "mountkeeper.slice"

// CgroupScoper gives every mount a cgroup of its own, Root/Parent/<unit>, outside the agent's
// cgroup, and a session of its own. The helper is placed in that cgroup by clone3 itself
// (CLONE_INTO_CGROUP), so it never runs a single instruction in the agent's cgroup: a kill
// of the agent's whole cgroup cannot catch it, nor the FUSE daemon it forks.
//
// On a hybrid host the helper also leaves the agent's cgroup v1 groups, at once after it
// starts, and what it forked meanwhile follows at Settle (scoper_v1.go): a supervisor that kills by a v1 cgroup would otherwise still kill the
// FUSE daemon.
type CgroupScoper struct {
	Root   string // the cgroup2 mount point, e.g. /sys/fs/cgroup/unified
	Parent string // directory under Root holding one cgroup per mount
}

var _ Scoper = (*CgroupScoper)(nil)

// NewCgroupScoper returns a CgroupScoper under root's DefaultCgroupParent.
func NewCgroupScoper(root string) *CgroupScoper {
	return &CgroupScoper{Root: root, Parent: DefaultCgroupParent}
}

// Name implements Scoper.
func (c *CgroupScoper) Name() string { return "cgroup" }

// Dir is the cgroup of unit.
func (c *CgroupScoper) Dir(unit string) string { return filepath.Join(c.Root, c.Parent, unit) }

// Start implements Scoper.
func (c *CgroupScoper) Start(ctx context.Context, job Job) (*exec.Cmd, error) {
	dir := c.Dir(job.Unit)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the mount's cgroup: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the mount's cgroup: %w", &os.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(fd) // the child has it from clone3; ours is not needed after Start
	cmd, err := sessionCommand(ctx, job)
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s in cgroup %s: %w", job.Argv[0], dir, err)
	}
	if err := c.leaveV1(job.Unit, cmd.Process.Pid); err != nil {
		// The mount still works; only a kill of the agent's v1 groups would reach it.
		fmt.Fprintf(os.Stderr, "mountkeeper: %s stays in the agent's cgroup v1 groups: %v\n", job.Argv[0], err)
	}
	return cmd, nil
}

// Units lists the units whose cgroups exist.
func (c *CgroupScoper) Units() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(c.Root, c.Parent))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var units []string
	for _, e := range entries {
		if e.IsDir() {
			units = append(units, e.Name())
		}
	}
	return units, nil
}

// Remove implements Scoper: it removes the unit's cgroup if it is empty.
func (c *CgroupScoper) Remove(unit string) error {
	dir := c.Dir(unit)
	// The v1 groups first: a process that left the cgroup2 group may still be counted in
	// them a moment longer, and once the cgroup2 group is gone nothing would retry them.
	if err := c.removeV1(unit); err != nil {
		return err
	}
	return rmdirCgroup(dir)
}

// errBusy marks a cgroup that still has processes (or child groups): the caller may retry.
var errBusy = errors.New("still has processes")

// rmdirCgroup removes the cgroup dir: nil if it is gone, an error wrapping errBusy while
// something still runs in it, else the rmdir error.
func rmdirCgroup(dir string) error {
	err := unix.Rmdir(dir)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.ENOTEMPTY):
		return fmt.Errorf("cgroup %s %w", dir, errBusy)
	}
	return &os.PathError{Op: "rmdir", Path: dir, Err: err}
}

// Kill kills every process in the unit's cgroup (cgroup.kill, Linux 5.14 or newer) and
// removes the cgroup once it is empty. The removal is not tidiness: on Linux 6.18 (seen here) a
// process later cloned into a cgroup that was ever killed (CLONE_INTO_CGROUP) is killed at
// once, so the next mount attempt must get a fresh cgroup.
func (c *CgroupScoper) Kill(unit string) error {
	dir := c.Dir(unit)
	err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := c.Remove(unit)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
