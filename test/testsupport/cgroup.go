package testsupport

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CgroupV2 returns pid's cgroup v2 path ("/a/b", relative to the cgroup2 root) from
// /proc/PID/cgroup.
func CgroupV2(pid int) (string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", err
	}
	if p, ok := ParseCgroupV2(string(data)); ok {
		return p, nil
	}
	return "", fmt.Errorf("pid %d has no cgroup2 entry: %s", pid, data)
}

// ParseCgroupV2 returns the path of the cgroup v2 line ("0::/a/b") of a /proc/PID/cgroup.
func ParseCgroupV2(procCgroup string) (string, bool) {
	for _, line := range strings.Split(procCgroup, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, true
		}
	}
	return "", false
}

// StartInCgroup starts cmd in the cgroup dir: clone3 places it there (CLONE_INTO_CGROUP), so
// it never runs in the caller's cgroup.
func StartInCgroup(cmd *exec.Cmd, dir string) error {
	fd, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer fd.Close() // the child has it from clone3
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(fd.Fd())
	return cmd.Start()
}

// KillCgroup kills every process in the cgroup dir (cgroup.kill) and waits, up to timeout,
// until it is empty. "populated 0" comes once the processes have exited (a zombie does not
// count: checked on 6.18); only then can the cgroup be removed. When they have not exited by
// then it returns the pids still there (a process that outlives SIGKILL is stuck in the
// kernel) with an error.
func KillCgroup(dir string, timeout time.Duration) (left []int, err error) {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return nil, fmt.Errorf("kill cgroup %s: %w", dir, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		events, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil || strings.Contains(string(events), "populated 0") {
			return nil, err
		}
		if time.Now().After(deadline) {
			procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, f := range strings.Fields(string(procs)) {
				if pid, err := strconv.Atoi(f); err == nil {
					left = append(left, pid)
				}
			}
			return left, fmt.Errorf("cgroup %s still populated %v after cgroup.kill", dir, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
