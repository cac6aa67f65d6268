// Package hostns moves `mountkeeper nri` (and `runtime configure|unconfigure` and `node
// cleanup`, the chart's init container and uninstall) into the host's mount and cgroup
// namespaces when it is started in a container (a pod with hostPID: true and privileged):
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
// re-executes this binary from there (execve keeps the calling thread's namespaces), as a
// reexec entry that the caller registered, which runs the command again and may not enter
// twice. The
// directory of the config named by --config is opened first and the config handed over as
// /proc/self/fd/N/<name>: its path is a path in the container (a ConfigMap), not on the host.
// The directory, not the file: kubelet updates a ConfigMap volume by swapping its ..data
// symlink, and the reload watches the directory (configs/watch) through that descriptor.
package hostns

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/reexec"
)

// Flag and PIDFlag are the names of the flags that ask for Enter.
const (
	Flag    = "host-namespaces"
	PIDFlag = Flag + "-pid"
)

// flagText names the flag in errors.
const flagText = "--" + Flag

// Enter re-executes this binary as the reexec entry named entry, with args (without the flags
// that led here) in the mount and cgroup namespaces of pid (1: the host's init, seen with
// hostPID). The config at configPath and files (flag name -> a path in the container: the
// ServiceAccount token, the CA, the TLS certificate) are handed over as /proc/self/fd/N/<name>
// through their directories; configPath "" hands over no config (a command without one). It
// returns only on failure.
func Enter(entry string, args []string, pid, configPath string, files map[string]string) error {
	if n, err := strconv.Atoi(pid); err != nil || n < 1 {
		return fmt.Errorf("--%s %q: not a process ID", PIDFlag, pid)
	}
	var err error
	if configPath != "" {
		args, err = handOverConfig(args, configPath)
		if err != nil {
			return err
		}
	}
	// Through the directory, not the file: kubelet updates a projected ServiceAccount token
	// and a Secret volume by swapping their ..data symlink.
	dirs := map[string]*os.File{}
	for _, flagName := range slices.Sorted(maps.Keys(files)) {
		path := files[flagName]
		dir, ok := dirs[filepath.Dir(path)]
		if !ok {
			if dir, err = os.Open(filepath.Dir(path)); err != nil {
				return fmt.Errorf("%s: --%s: %w", flagText, flagName, err)
			}
			if _, err := unix.FcntlInt(dir.Fd(), unix.F_SETFD, 0); err != nil {
				return fmt.Errorf("%s: keep %s open across exec: %w", flagText, filepath.Dir(path), err)
			}
			dirs[filepath.Dir(path)] = dir
		}
		args = append(args, "--"+flagName, "/proc/self/fd/"+strconv.Itoa(int(dir.Fd()))+"/"+filepath.Base(path))
	}
	self, err := os.Open(reexec.Self)
	if err != nil {
		return fmt.Errorf("%s: open this binary: %w", flagText, err)
	}
	// The thread that enters the namespaces execs; it must not run anything else meanwhile.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("%s: unshare(CLONE_FS): %w", flagText, err)
	}
	for _, ns := range []struct {
		name string
		typ  int
	}{{"cgroup", unix.CLONE_NEWCGROUP}, {"mnt", unix.CLONE_NEWNS}} {
		path := "/proc/" + pid + "/ns/" + ns.name
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: open %s (is the pod hostPID?): %w", flagText, path, err)
		}
		err = unix.Setns(fd, ns.typ)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: enter the %s namespace of PID %s (is the container privileged?): %w", flagText, ns.name, pid, err)
		}
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("%s: chdir /: %w", flagText, err)
	}
	// The binary lies in the container's root, which the host's namespace does not show:
	// exec it through the descriptor opened before the switch.
	argv := append([]string{entry}, args...)
	err = unix.Exec("/proc/self/fd/"+strconv.Itoa(int(self.Fd())), argv, os.Environ())
	return fmt.Errorf("%s: re-execute: %w", flagText, err)
}

// handOverConfig adds --config naming the config at configPath through a descriptor of its
// directory that survives the exec.
func handOverConfig(args []string, configPath string) ([]string, error) {
	_, err := os.Stat(configPath)
	var configDir *os.File
	if err == nil {
		configDir, err = os.Open(filepath.Dir(configPath))
	}
	switch {
	case err == nil:
		// Go opens files close-on-exec; this one must survive the exec.
		if _, err := unix.FcntlInt(configDir.Fd(), unix.F_SETFD, 0); err != nil {
			return nil, fmt.Errorf("%s: keep %s open across exec: %w", flagText, filepath.Dir(configPath), err)
		}
		return append(args, "--config", "/proc/self/fd/"+strconv.Itoa(int(configDir.Fd()))+"/"+filepath.Base(configPath)), nil
	case os.IsNotExist(err) && configPath == configs.DefaultPath:
		// No file at the default path in the container: the re-executed process looks on the
		// host, then falls back to the embedded default, as without the flag.
		return args, nil
	default:
		return nil, fmt.Errorf("%s: %w", flagText, err)
	}
}
