package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// MountsAt counts the mounts stacked at path in this mount namespace.
func MountsAt(path string) (int, error) {
	ms, err := testsupport.MountsAt(path)
	return len(ms), err
}

// ProcessCgroup returns the cgroup2 path of the first process whose command line contains
// every one of words (e.g. "sshfs" and its export, to find a FUSE daemon whose name may be
// sshfs or mount.fuse.sshfs), and "" when no process does.
func ProcessCgroup(words ...string) string {
	dir := processDir(words)
	if dir == "" {
		return ""
	}
	cg, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
	rest, _ := testsupport.ParseCgroupV2(string(cg))
	return rest
}

// ProcessPid returns the PID of the first process whose command line contains every one of
// words, and 0 when no process does.
func ProcessPid(words ...string) int {
	pid, _ := strconv.Atoi(filepath.Base(processDir(words)))
	return pid
}

// processDir is /proc/<pid> of the first process whose command line contains every word.
func processDir(words []string) string {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		cmd, err := os.ReadFile(p)
		if err == nil && containsAll(string(cmd), words) {
			return filepath.Dir(p)
		}
	}
	return ""
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
