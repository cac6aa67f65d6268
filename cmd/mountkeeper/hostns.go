package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/configs"
)

// hostNamespacesFlag makes `mountkeeper nri` run in the host's mount and cgroup namespaces
// when it is started in a container (a DaemonSet pod with hostPID: true and privileged):
//   - the mount namespace, so that it sees the host's paths and mount table (class sources,
//     the kubelet root, the NRI socket, its state dir), checks propagation against the host's
//     mounts, and mounts network filesystems and subPath repairs where the host and kubelet
//     see them;
//   - the cgroup namespace, so that the cgroup2 mount it finds there is the host's whole
//     hierarchy and each mount helper's group (mountkeeper.slice/mount-<key>) lies outside
//     the pod's cgroup; with nsdelegate (systemd's default) a process cannot move a helper to
//     a cgroup outside its own cgroup namespace.
//
// The image has no nsenter (it holds only mountkeeper and mountkeeper-hook), so the binary
// enters them itself: Go runs many threads that share one fs_struct, and setns(CLONE_NEWNS)
// refuses such a thread, so one locked thread unshares CLONE_FS, enters both namespaces of PID 1 and
// re-executes this binary from there (execve keeps the calling thread's namespaces). The
// directory of the config named by --config is opened first and the config handed over as
// /proc/self/fd/N/<name>: its path is a path in the container (a ConfigMap), not on the host.
// The directory, not the file: kubelet updates a ConfigMap volume by swapping its ..data
// symlink, and the reload watches the directory (configs/watch) through that descriptor.
const hostNamespacesFlag = "--" + hostNamespacesName

// hostNamespacesName and hostNamespacesPIDName are the flags' names without the dashes.
const (
	hostNamespacesName    = "host-namespaces"
	hostNamespacesPIDName = hostNamespacesName + "-pid"
)

// hostNamespacesEnv marks the re-executed process, which must not enter again.
const hostNamespacesEnv = "_MOUNTKEEPER_IN_HOST_NAMESPACES"

// enterHostNamespaces re-executes `mountkeeper <command...> args...` (args without the flag;
// command "nri", or "node", "cleanup") in the mount and cgroup namespaces of pid (1: the
// host's init, seen with hostPID). It returns only on failure.
func enterHostNamespaces(command, args []string, pid, configPath string) error {
	if n, err := strconv.Atoi(pid); err != nil || n < 1 {
		return fmt.Errorf("--host-namespaces-pid %q: not a process ID", pid)
	}
	if os.Getenv(hostNamespacesEnv) != "" {
		return fmt.Errorf("%s: already re-executed in the host's namespaces", hostNamespacesFlag)
	}
	_, err := os.Stat(configPath)
	var configDir *os.File
	if err == nil {
		configDir, err = os.Open(filepath.Dir(configPath))
	}
	switch {
	case err == nil:
		// Go opens files close-on-exec; this one must survive the exec.
		if _, err := unix.FcntlInt(configDir.Fd(), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("%s: keep %s open across exec: %w", hostNamespacesFlag, filepath.Dir(configPath), err)
		}
		args = append(args, "--config", "/proc/self/fd/"+strconv.Itoa(int(configDir.Fd()))+"/"+filepath.Base(configPath))
	case os.IsNotExist(err) && configPath == configs.DefaultPath:
		// No file at the default path in the container: the re-executed process looks on the
		// host, then falls back to the embedded default, as without the flag.
	default:
		return fmt.Errorf("%s: %w", hostNamespacesFlag, err)
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("%s: open this binary: %w", hostNamespacesFlag, err)
	}
	// The thread that enters the namespaces execs; it must not run anything else meanwhile.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("%s: unshare(CLONE_FS): %w", hostNamespacesFlag, err)
	}
	for _, ns := range []struct {
		name string
		typ  int
	}{{"cgroup", unix.CLONE_NEWCGROUP}, {"mnt", unix.CLONE_NEWNS}} {
		path := "/proc/" + pid + "/ns/" + ns.name
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: open %s (is the pod hostPID?): %w", hostNamespacesFlag, path, err)
		}
		err = unix.Setns(fd, ns.typ)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: enter the %s namespace of PID %s (is the container privileged?): %w", hostNamespacesFlag, ns.name, pid, err)
		}
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("%s: chdir /: %w", hostNamespacesFlag, err)
	}
	env := append(slices.Clone(os.Environ()), hostNamespacesEnv+"=1")
	// The binary lies in the container's root, which the host's namespace does not show:
	// exec it through the descriptor opened before the switch.
	argv := append(append([]string{os.Args[0]}, command...), args...)
	err = unix.Exec("/proc/self/fd/"+strconv.Itoa(int(self.Fd())), argv, env)
	return fmt.Errorf("%s: re-execute: %w", hostNamespacesFlag, err)
}
