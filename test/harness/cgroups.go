package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// cgroupHierarchies returns the mount points of all cgroup v1 and v2 hierarchies. On the
// hybrid layout of the test machines runc creates a container's cgroup in each of them.
func cgroupHierarchies() ([]string, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if (m.fsType == "cgroup" || m.fsType == "cgroup2") && !slices.Contains(out, m.mountPoint) {
			out = append(out, m.mountPoint)
		}
	}
	return out, nil
}

// removeCgroups removes cgroup parent (as in a pod's cgroup_parent) and everything below it
// in every hierarchy. Cgroups are removed with rmdir, children first; a cgroup whose last
// process has just been killed may stay busy for a moment, hence the retries.
func removeCgroups(parent string, timeout time.Duration) error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		if err := removeCgroupTree(filepath.Join(h, parent), timeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// defaultCgroupsExist says whether containerd's default cgroup namespace (/k8s.io) exists in
// any hierarchy.
func defaultCgroupsExist() bool {
	hierarchies, _ := cgroupHierarchies()
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, defaultCgroupNamespace)); err == nil {
			return true
		}
	}
	return false
}

// removeCgroupIfEmpty removes cgroup cg in every hierarchy where it exists and is empty. Where
// it still holds a cgroup or a process (rmdir: EBUSY, or ENOTEMPTY) it is left, and that is
// no error: cg is containerd's /k8s.io, which every containerd of the machine shares, and the
// pods there are another kubelet's; teardown has removed ours, or failed naming them.
func removeCgroupIfEmpty(cg string) error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		err := os.Remove(filepath.Join(h, cg))
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", filepath.Join(h, cg), err))
		}
	}
	return errors.Join(errs...)
}

func removeCgroupTree(root string, timeout time.Duration) error {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("walk cgroup %s: %w", root, err)
	}
	deadline := time.Now().Add(timeout)
	for _, d := range slices.Backward(dirs) { // WalkDir lists parents first
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", d, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
