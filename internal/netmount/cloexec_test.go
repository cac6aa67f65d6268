package netmount

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A descriptor the agent inherited without close-on-exec (from a runtime, a shell, systemd)
// must not reach the mount helpers and FUSE daemons it starts.
func TestMarkInheritedCloseOnExec(t *testing.T) {
	fd, err := syscall.Dup(1) // dup(2) leaves FD_CLOEXEC clear, as an inherited descriptor has it
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	sees := func() bool {
		out, err := exec.Command("/bin/sh", "-c", "[ -e /proc/$$/fd/"+strconv.Itoa(fd)+" ] && echo open || echo closed").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out)) == "open"
	}
	if !sees() {
		t.Fatalf("a helper does not see fd %d even before: the test proves nothing", fd)
	}
	if err := MarkInheritedCloseOnExec(); err != nil {
		t.Fatal(err)
	}
	if sees() {
		t.Errorf("a helper started after MarkInheritedCloseOnExec still has fd %d", fd)
	}
	// The agent itself keeps it.
	if _, err := syscall.Write(fd, nil); err != nil {
		t.Errorf("fd %d unusable after MarkInheritedCloseOnExec: %v", fd, err)
	}
}
