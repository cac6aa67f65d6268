package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// cgroupV1Hierarchy is one cgroup v1 hierarchy of the host, as the calling process sees it.
type cgroupV1Hierarchy struct {
	name    string // its directory below /sys/fs/cgroup: cpu, memory, systemd, ...
	options string // mount options that mount it again: "memory", "none,name=systemd"
	mount   string // host mount point
	self    string // the calling process's cgroup in it
}

// joinScript moves the shell into the cgroup.procs files it is given (v1 cgroups) and execs
// the rest of its arguments: $1 is the number of files.
const joinScript = `set -eu
n=$1; shift
while [ "$n" -gt 0 ]; do echo $$ > "$1"; shift; n=$((n-1)); done
exec "$@"
`

// parent is the host directory of the calling process's cgroup in h.
func (h cgroupV1Hierarchy) parent() string { return filepath.Join(h.mount, h.self) }

// create makes the cgroup name below the calling process's cgroup in h and returns its host
// path. A new cpuset cgroup has no CPUs and memory nodes, and no process can join it: it gets
// its parent's.
func (h cgroupV1Hierarchy) create(name string) (string, error) {
	dir := filepath.Join(h.parent(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return dir, fmt.Errorf("create cgroup: %w", err)
	}
	if slices.Contains(strings.Split(h.options, ","), "cpuset") {
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(h.parent(), f))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, f), v, 0)
			}
			if err != nil {
				return dir, fmt.Errorf("cgroup %s: copy %s: %w", dir, f, err)
			}
		}
	}
	return dir, nil
}

// cgroupV1Hierarchies lists the host's cgroup v1 hierarchies mounted below /sys/fs/cgroup,
// with the calling process's cgroup in each.
func cgroupV1Hierarchies() ([]cgroupV1Hierarchy, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	table, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	out, err := parseCgroupV1Hierarchies(string(table), string(own))
	if err == nil && len(out) > 0 && !cgroup2At("/sys/fs/cgroup/unified") {
		err = errors.New("cgroup v1 hierarchies without cgroup2 at /sys/fs/cgroup/unified: not the hybrid layout systemd supports")
	}
	return out, err
}

// parseCgroupV1Hierarchies finds, in a process's mountinfo, the cgroup v1 hierarchies mounted
// below /sys/fs/cgroup, and in its /proc/PID/cgroup its cgroup in each (the line that names
// the same controllers).
func parseCgroupV1Hierarchies(table, ownCgroups string) ([]cgroupV1Hierarchy, error) {
	self := map[string]string{} // controllers, sorted -> path
	for _, line := range strings.Split(strings.TrimSpace(ownCgroups), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] != "" {
			self[controllerKey(parts[1])] = parts[2]
		}
	}
	mounts, err := testsupport.ParseMounts(table, mountinfo.FSTypeFilter("cgroup"))
	if err != nil {
		return nil, err
	}
	var out []cgroupV1Hierarchy
	for _, m := range mounts {
		mount := m.Mountpoint
		if filepath.Dir(mount) != "/sys/fs/cgroup" {
			continue
		}
		var ctrls []string
		for _, o := range strings.Split(m.VFSOptions, ",") {
			// Not a controller: access mode and the hierarchy's flags (release_agent=,
			// clone_children, xattr, noprefix, cpuset_v2_mode).
			if o != "rw" && o != "ro" && o != "xattr" && o != "noprefix" && !strings.Contains(o, "_") {
				ctrls = append(ctrls, o)
			}
		}
		key := controllerKey(strings.Join(ctrls, ","))
		path, ok := self[key]
		if !ok {
			return nil, fmt.Errorf("cgroup v1 hierarchy %s (%s): the process's cgroup file has no line for it", mount, key)
		}
		options := strings.Join(ctrls, ",")
		if !slices.ContainsFunc(ctrls, func(c string) bool { return !strings.HasPrefix(c, "name=") }) {
			options = "none," + options // a named hierarchy without controllers
		}
		out = append(out, cgroupV1Hierarchy{name: filepath.Base(mount), options: options, mount: mount, self: path})
	}
	return out, nil
}

// controllerKey is a hierarchy's controllers, sorted, comma-separated.
func controllerKey(list string) string {
	c := strings.Split(list, ",")
	slices.Sort(c)
	return strings.Join(c, ",")
}

// cgroup2At says whether the cgroup2 hierarchy is mounted at path.
func cgroup2At(path string) bool {
	mounts, err := readMounts()
	if err != nil {
		return false
	}
	for _, m := range mounts {
		if m.mountPoint == path && m.fsType == "cgroup2" {
			return true
		}
	}
	return false
}
