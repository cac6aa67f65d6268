package netmount

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// MarkInheritedCloseOnExec sets close-on-exec on every file descriptor above 2. Go opens its
// own files close-on-exec, but a descriptor the agent inherited (from the runtime that started
// a hook or a pre-registered plugin, from a shell, from systemd) has it clear and would
// otherwise reach every mount helper and FUSE daemon, which outlive the agent. The agent keeps
// using them (an NRI socket passed by the runtime, say). Call it first thing in main.
func MarkInheritedCloseOnExec() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return os.NewSyscallError("close_range", err)
	}
	// Before Linux 5.11: one by one.
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	dirFD := int(f.Fd())
	defer f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd <= 2 || fd == dirFD {
			continue
		}
		unix.CloseOnExec(fd) // a descriptor closed since the listing is no matter
	}
	return nil
}
