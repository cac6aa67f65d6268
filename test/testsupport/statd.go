package testsupport

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// StatdPid is the pid in /run/rpc.statd.pid (the node's NFS lock status daemon) if that
// process lives, else 0.
func StatdPid() int {
	data, err := os.ReadFile("/run/rpc.statd.pid")
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}
