package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// Cgroup2 is a cgroup of the cgroup2 hierarchy that a test made, e.g. to run the plugin in and
// then kill it whole, as a supervisor restarting the agent does.
type Cgroup2 struct{ Dir string }

// Cgroup2Root is where the cgroup2 hierarchy is mounted: /sys/fs/cgroup on a unified host,
// /sys/fs/cgroup/unified on a hybrid one.
func Cgroup2Root() (string, error) {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no cgroup2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
}

// NewCgroup2 makes the cgroup name below the cgroup2 root.
func NewCgroup2(name string) (*Cgroup2, error) {
	root, err := Cgroup2Root()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	return &Cgroup2{Dir: dir}, nil
}

// Kill kills every process in the cgroup (cgroup.kill), waits until it is empty, and makes
// it anew: on Linux 6.18 (seen here) a process cloned into a cgroup that was ever killed is
// killed at once, and a supervisor restarts the agent in a fresh cgroup of the same name.
func (c *Cgroup2) Kill() error {
	if err := c.kill(); err != nil {
		return err
	}
	if err := os.Remove(c.Dir); err != nil {
		return fmt.Errorf("remove killed cgroup: %w", err)
	}
	return os.Mkdir(c.Dir, 0o755)
}

func (c *Cgroup2) kill() error {
	// A process that outlives SIGKILL is stuck in the kernel: the error says which and where,
	// so that a failure can be understood from a CI log alone.
	left, err := testsupport.KillCgroup(c.Dir, cgroupKillTimeout)
	if len(left) > 0 {
		return fmt.Errorf("%w: %s", err, describeProcs(left))
	}
	return err
}

// Remove kills what is left in the cgroup and removes it. Safe to call twice.
func (c *Cgroup2) Remove() error {
	if _, err := os.Stat(c.Dir); os.IsNotExist(err) {
		return nil
	}
	if err := c.kill(); err != nil {
		return err
	}
	return os.Remove(c.Dir)
}

// RemoveMountScope removes the cgroup a network mount ran in (netmount's cgroup scope
// mountkeeper.slice/mount-<key>), killing what is left in it, and mountkeeper.slice if that
// is then empty: for tests and the demo, whose mounts may be cut short.
func RemoveMountScope(key string) error {
	root, err := Cgroup2Root()
	if err != nil {
		return nil
	}
	parent := filepath.Join(root, "mountkeeper.slice")
	err = (&Cgroup2{Dir: filepath.Join(parent, "mount-"+key)}).Remove()
	os.Remove(parent) // only if empty: another mount's cgroup may live there
	// On a hybrid host the scope also has a group in each cgroup v1 hierarchy; its processes
	// are gone with the cgroup2 group above.
	if mounts, rerr := readMounts(); rerr == nil {
		for _, m := range mounts {
			if m.fsType == "cgroup" {
				os.Remove(filepath.Join(m.mountPoint, "mountkeeper.slice", "mount-"+key))
				os.Remove(filepath.Join(m.mountPoint, "mountkeeper.slice"))
			}
		}
	}
	return err
}

// StartInCgroup starts cmd in the cgroup dir: clone3 places it there (CLONE_INTO_CGROUP), so
// it never runs in the caller's cgroup.
func StartInCgroup(cmd *exec.Cmd, dir string) error { return testsupport.StartInCgroup(cmd, dir) }

// Cgroup2CPU is the CPU time used by the processes of the cgroup2 directory dir and its
// descendants, those gone included (usage_usec in its cpu.stat); 0 where dir does not exist.
func Cgroup2CPU(dir string) (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			return 0, nil
		}
	}
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			usec, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s/cpu.stat: %q: %w", dir, line, err)
			}
			return time.Duration(usec) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("%s/cpu.stat has no usage_usec", dir)
}
