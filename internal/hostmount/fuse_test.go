package hostmount

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/specmod"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/privatens"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestCachedCheckAsksNoFUSEServer: deciding whether a source's filesystem can be cached must
// not ask the filesystem. For sshfs, statfs(2) is a round trip to the server (it made every
// container of an sshfs class about 300 us slower) and never returns while the server hangs.
// Here the sshfs daemon is stopped between two checks of a source on it (the second comes
// within the kernel's attribute cache time, so only a request the check should not make
// reaches the daemon); the second must pass.
func TestCachedCheckAsksNoFUSEServer(t *testing.T) {
	testenv.Require(t, "root", "sshfs", "/usr/sbin/sshd", "ssh-keygen")
	privatens.Require(t)
	dir := harness.WorkDir(t, "mk-hostmount-fuse-")
	sshd, err := harness.StartSSHD(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sshd.Stop)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := strings.Join(sshd.ClientOptions(), ",")
	if out, err := exec.Command("mount", "-t", "fuse.sshfs", "-o", opts, "root@127.0.0.1:"+sshd.Export(), mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount sshfs: %v: %s", err, out)
	}
	t.Cleanup(func() { harness.UnmountAll(dir) })

	c, err := NewChecker(System{}).WithTimeout(10 * time.Second).WithCache()
	if err != nil {
		t.Fatal(err)
	}
	mounts := []specmod.Mount{{Source: mnt, Destination: "/data", Propagation: specmod.Private}}
	if err := c.CheckSources(mounts); err != nil {
		t.Fatalf("check with the server up: %v", err)
	}
	daemon := sshfsDaemon(t, mnt)
	if err := daemon.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { daemon.Signal(syscall.SIGCONT) }) // before the unmount: cleanups run last first
	if err := c.CheckSources(mounts); err != nil {
		t.Fatalf("check with the sshfs daemon stopped: %v", err)
	}
}

// sshfsDaemon finds the sshfs process serving mnt (sshfs, or mount.fuse.sshfs as mount(8)
// starts it).
func sshfsDaemon(t *testing.T, mnt string) *os.Process {
	t.Helper()
	pid := harness.ProcessPid("sshfs", mnt)
	if pid == 0 {
		t.Fatalf("no sshfs process serves %s", mnt)
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	return proc
}
