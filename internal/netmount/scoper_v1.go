package netmount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/sys/mountinfo"
)

// On a hybrid host (cgroup v1 controllers beside the cgroup2 hierarchy) clone3 places the
// mount helper in its own cgroup2 group only: in every v1 hierarchy it stays in the agent's
// group, and a supervisor that kills by a v1 cgroup (runc kills a container's processes through
// its v1 groups on such a host; seen when the plugin's DaemonSet pod is deleted) takes the FUSE
// daemon with it. So the helper also moves to a group of its own, <parent>/<unit>, in each v1
// hierarchy, at once after it starts; then every process already in its cgroup2 group (a child
// forked before the move) follows. A child forked later inherits the new groups, except one
// forked by a process listed but not yet moved: Settle, once the helper has exited, moves it.

// Settle moves every process of the unit's cgroup2 group into the unit's v1 groups: run when
// the helper exited, it catches what a process forked between leaveV1's reading of the group
// and its move (sshfs forks its ssh early; a kill of the agent's v1 groups would take that ssh,
// and sshfs with it).
func (c *CgroupScoper) Settle(unit string) error { return c.leaveV1(unit, 0) }

// v1Hierarchies lists the mount points of this host's cgroup v1 hierarchies. They do not
// change while the agent runs: mountinfo is read once it has been read successfully (a failed
// read is retried next time, not remembered as "no v1 hierarchy").
func v1Hierarchies() ([]string, error) {
	v1Once.Lock()
	defer v1Once.Unlock()
	if v1Once.dirs == nil {
		dirs, err := readV1Hierarchies()
		if err != nil {
			return nil, err
		}
		v1Once.dirs = dirs
	}
	return v1Once.dirs, nil
}

var v1Once struct {
	sync.Mutex
	dirs []string // non-nil once read
}

func readV1Hierarchies() ([]string, error) {
	ms, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup"))
	if err != nil {
		return nil, err
	}
	dirs := make([]string, 0, len(ms))
	for _, m := range ms {
		dirs = append(dirs, m.Mountpoint)
	}
	return dirs, nil
}

// leaveV1 moves pid (if > 0), then every process of the unit's cgroup2 group, into the unit's
// group in each v1 hierarchy. Without v1 hierarchies it does nothing.
func (c *CgroupScoper) leaveV1(unit string, pid int) error {
	hierarchies, err := v1Hierarchies()
	if err != nil || len(hierarchies) == 0 {
		return err
	}
	var errs []error
	dirs := make([]string, 0, len(hierarchies)) // the unit's group in each, made once per call
	for _, h := range hierarchies {
		dir := filepath.Join(h, c.Parent, unit)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		inheritCpuset(h, filepath.Join(h, c.Parent), dir)
		dirs = append(dirs, dir)
	}
	move := func(p string) {
		for _, dir := range dirs {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(p), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("move %s into %s: %w", p, dir, err))
			}
		}
	}
	if pid > 0 {
		move(strconv.Itoa(pid))
	}
	procs, err := os.ReadFile(filepath.Join(c.Dir(unit), "cgroup.procs"))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, p := range strings.Fields(string(procs)) {
		if p != strconv.Itoa(pid) {
			move(p)
		}
	}
	return errors.Join(errs...)
}

// removeV1 removes the unit's (empty) groups in the v1 hierarchies. It fails while one is
// still busy, for the caller to retry before it removes the cgroup2 group (nothing would
// retry them after that). A group that cannot be removed for another reason (a read-only
// hierarchy, say) will not become removable by waiting: it does not hold the caller back.
func (c *CgroupScoper) removeV1(unit string) error {
	hierarchies, _ := v1Hierarchies()
	var busy []error
	for _, h := range hierarchies {
		if err := rmdirCgroup(filepath.Join(h, c.Parent, unit)); errors.Is(err, errBusy) {
			busy = append(busy, err)
		}
	}
	return errors.Join(busy...)
}

// inheritCpuset gives new cpuset groups their parent's CPUs and memory nodes: a v1 cpuset group
// starts empty, and a process cannot join an empty one. Other hierarchies lack the files.
func inheritCpuset(dirs ...string) {
	for i := 1; i < len(dirs); i++ {
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			have, err := os.ReadFile(filepath.Join(dirs[i], f))
			if err != nil || strings.TrimSpace(string(have)) != "" {
				continue
			}
			if parent, err := os.ReadFile(filepath.Join(dirs[i-1], f)); err == nil {
				os.WriteFile(filepath.Join(dirs[i], f), parent, 0o644)
			}
		}
	}
}
