package testsupport

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DStateThreads counts the threads of process pid in uninterruptible sleep (D state): those
// stuck in the kernel, on a dead hard NFS mount for one, which no signal ends.
func DStateThreads(pid int) (int, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil {
		return 0, err
	}
	if len(tasks) == 0 {
		return 0, fmt.Errorf("no threads of process %d in /proc", pid)
	}
	n := 0
	for _, p := range tasks {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		if threadState(string(data)) == 'D' {
			n++
		}
	}
	return n, nil
}

// threadState is the state letter in a /proc/PID/task/TID/stat line: "pid (comm) S ...", where
// comm may itself hold spaces and parentheses, so the state follows the last ')'.
func threadState(stat string) byte {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}
