package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SystemdBinary is the systemd that StartSystemd boots (Debian's).
const SystemdBinary = "/lib/systemd/systemd"

// systemdHostRoot is where the host's root filesystem is inside, after pivot_root: a bind of
// it without the mounts on it, but for the host's /tmp, where the harness's instances live.
const systemdHostRoot = "/run/mk-host"

// SystemdTarget is the unit systemd boots into. basic.target, not multi-user.target: the
// network namespace is the host's, so the services multi-user.target pulls in on a Debian host
// (ssh.service, postgresql.service, ...) would listen on the host's ports.
const SystemdTarget = "basic.target"

const (
	// systemdCgroupPrefix names the cgroups of StartSystemd, below the cgroup2 root:
	// mk-systemd-<owner pid>-<owner start time>-<n>, so a later StartSystemd can tell the
	// cgroups of a test process that died (timeout panic, SIGKILL) and sweep them.
	systemdCgroupPrefix = "mk-systemd-"
	// systemdStartTimeout bounds the wait for the exec of systemd (not its boot: WaitRunning).
	systemdStartTimeout = 30 * time.Second
	// systemdKillTimeout bounds the wait for the cgroup to empty after cgroup.kill.
	systemdKillTimeout = 10 * time.Second
)

// systemdEnv is the environment of systemd and of what Run starts. container= tells systemd it
// runs in a container: it skips what only a host's init does (mounting /sys/fs/cgroup itself,
// loading a policy, starting getty on a VT, ...) and ConditionVirtualization=!container units.
var systemdEnv = []string{
	"container=mountkeeper-test",
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LC_ALL=C",
}

// Systemd is a real systemd (SystemdBinary --system) booted as PID 1 of mount, PID, cgroup,
// UTS and IPC namespaces of its own, in a cgroup2 directory of its own. The network namespace
// is the host's: a server on 127.0.0.1 on the host is reachable inside.
//
// Its root is an overlay of the host's root filesystem (lower, read-only in effect) with its
// upper layer on a tmpfs: what happens inside (units written to /etc/systemd/system, files
// created in /var/lib) never reaches the host. Inside it has its own proc, cgroup2 at
// /sys/fs/cgroup (the namespace's root is its own cgroup), tmpfs on /run and /tmp, and, where
// the recipe in CONTEXT.md shares the host's, read-only sysfs and /proc/sys (or udev and
// systemd-sysctl units would act on the host's devices and network settings) and a /dev of its
// own (a tmpfs with the host's null, zero, full, random, urandom, tty and fuse, a new devpts
// instance and shm; a bound /dev would get systemd-tmpfiles' static nodes), whose console
// is the file Log reads. Host paths it needs (a binary, a config, a key, a runtime's socket
// directory) are bound in at the same path (StartSystemd's binds, Bind).
//
// The root is the mount namespace's root (pivot_root, as on a host or in systemd-nspawn), not
// a chroot: a process that joins the namespace (setns, as `runc exec` does for CRI exec into
// a container of a runtime that runs inside) gets the root of the namespace, and in a chroot
// that would be the host's tree, not the container's. The host's root filesystem and /tmp
// alone (not the other mounts: the host's cgroup hierarchies there would lead runc astray)
// stay reachable inside at systemdHostRoot, for Bind.
//
// Everything it mounts is mounted in its own mount namespace: nothing is mounted on the host,
// and the mounts vanish with the namespace's last process. Every process of it (systemd, its
// services and scopes, FUSE daemons) is in its cgroup, and every process Run starts is in its
// PID namespace: Close kills systemd, which ends the PID namespace, then the cgroup. If the
// test process dies without Close, systemd gets SIGKILL (parent-death signal) and the kernel
// kills the rest of the PID namespace; the next StartSystemd removes the cgroup it left.
type Systemd struct {
	dir    string
	cgroup string // host path of the cgroup2 directory everything runs in
	cmd    *exec.Cmd
	exited chan struct{} // closed once unshare (the parent of systemd) has been reaped
	pid    int           // systemd, in the host's PID namespace
	pidfd  int           // systemd's pidfd, -1 when not open

	// v1Cgroups are the host paths of the instance's cgroups in the v1 hierarchies
	// (SystemdOptions.CgroupV1), the namespace's roots there.
	v1Cgroups []string

	mu     sync.Mutex
	killed bool           // Close has begun: Run must not target a PID that may be reused
	runs   sync.WaitGroup // Run commands under way
	closed bool
}

var systemdSeq atomic.Int64

// bootScript runs under `unshare --mount --pid --fork --cgroup --uts --ipc --propagation
// private`, as PID 1 of the new PID namespace, in the new cgroup: it builds the root and
// execs systemd in it. $1 is the instance directory; every further argument is a bind,
// "d:<dir>" or "f:<file>", or a cgroup v1 hierarchy to mount, "v:<name>:<mount options>"
// (any of these makes the layout hybrid: see SystemdOptions.CgroupV1).
const bootScript = `set -eu
D=$1; shift
R=$D/root
mount -t tmpfs -o mode=0755 mk-systemd-rw "$D/rw"
mkdir "$D/rw/upper" "$D/rw/work"
mount -t overlay -o "lowerdir=/,upperdir=$D/rw/upper,workdir=$D/rw/work" mk-systemd-root "$R"
mount -t proc proc "$R/proc"
mount --bind "$R/proc/sys" "$R/proc/sys"
mount -o remount,bind,ro "$R/proc/sys"
mount -t sysfs -o ro sysfs "$R/sys"
v1=
for b in "$@"; do case $b in v:*) v1=yes ;; esac; done
if [ -z "$v1" ]; then
	mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup"
else
	mount -t tmpfs -o mode=0755,nosuid,nodev,noexec mk-systemd-cgroup "$R/sys/fs/cgroup"
	mkdir "$R/sys/fs/cgroup/unified"
	mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup/unified"
fi
mount -t tmpfs -o mode=0755,nosuid mk-systemd-dev "$R/dev"
for n in null zero full random urandom tty fuse; do
	[ -e "/dev/$n" ] || continue
	: > "$R/dev/$n"
	mount --bind "/dev/$n" "$R/dev/$n"
done
mkdir "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$R/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev mk-systemd-shm "$R/dev/shm"
ln -s pts/ptmx "$R/dev/ptmx"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
: > "$R/dev/console"
mount --bind "$D/console.log" "$R/dev/console"
mount -t tmpfs -o mode=0755,nosuid,nodev mk-systemd-run "$R/run"
mount -t tmpfs -o mode=1777,nosuid,nodev mk-systemd-tmp "$R/tmp"
for b in "$@"; do
	case $b in
	v:*)
		n=${b#v:}; o=${n#*:}; n=${n%%:*}
		mkdir "$R/sys/fs/cgroup/$n"
		mount -t cgroup -o "$o" cgroup "$R/sys/fs/cgroup/$n"
		continue ;;
	esac
	p=${b#?:}
	case $b in
	d:*) mkdir -p "$R$p" ;;
	*) mkdir -p "$R$(dirname "$p")"; [ -e "$R$p" ] || : > "$R$p" ;;
	esac
	mount --bind "$p" "$R$p"
done
mkdir "$R/run/mk-old-root" "$R` + systemdHostRoot + `"
cd "$R"
pivot_root . run/mk-old-root
mount --bind /run/mk-old-root "` + systemdHostRoot + `"
if mountpoint -q /run/mk-old-root/tmp; then
	mount --bind /run/mk-old-root/tmp "` + systemdHostRoot + `/tmp"
fi
umount -l /run/mk-old-root
rmdir /run/mk-old-root
exec chroot . ` + SystemdBinary + ` --system --unit=` + SystemdTarget + `
`

// SystemdOptions configures StartSystemdWith.
type SystemdOptions struct {
	// Binds are absolute host paths, files or directories, bound (not recursively) at the
	// same path inside (Bind adds more after the boot).
	Binds []string
	// CgroupV1 gives the namespace the hybrid layout of a host whose controllers are on
	// cgroup v1 (as on the test machines, where cgroup2 has none of cpu, memory, pids):
	// a tmpfs on /sys/fs/cgroup, every v1 hierarchy of the host at /sys/fs/cgroup/<name>
	// rooted at a cgroup of the instance's own, and cgroup2 at /sys/fs/cgroup/unified.
	// systemd then runs in hybrid mode and applies a unit's limits through the v1
	// controllers, as kubelet's and runc's systemd cgroup driver need. Without it the
	// namespace has cgroup2 alone at /sys/fs/cgroup, with no controller to limit anything.
	CgroupV1 bool
}

// StartSystemd boots systemd in namespaces of its own (see Systemd) and returns once systemd
// runs as their PID 1; WaitRunning waits for the end of its boot. dir is the instance's own:
// it must not exist or be empty, and Close removes it. binds are absolute host paths, files
// or directories, bound (not recursively) at the same path inside.
//
// On failure StartSystemd cleans up after itself and returns the error with a nil *Systemd.
func StartSystemd(ctx context.Context, dir string, binds ...string) (*Systemd, error) {
	return StartSystemdWith(ctx, dir, SystemdOptions{Binds: binds})
}

// StartSystemdWith is StartSystemd with options.
func StartSystemdWith(ctx context.Context, dir string, opts SystemdOptions) (*Systemd, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("StartSystemd needs root")
	}
	for _, p := range []string{SystemdBinary, "/usr/bin/unshare", "/usr/bin/nsenter"} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("StartSystemd: %w", err)
		}
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("StartSystemd: dir %q is not absolute", dir)
	}
	dir = filepath.Clean(dir)
	args := []string{"-c", bootScript, "mk-systemd-boot", dir}
	for _, b := range opts.Binds {
		arg, err := bindArg(dir, b)
		if err != nil {
			return nil, fmt.Errorf("StartSystemd: %w", err)
		}
		args = append(args, arg)
	}
	root, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	var v1 []cgroupV1Hierarchy
	if opts.CgroupV1 {
		if v1, err = cgroupV1Hierarchies(); err != nil {
			return nil, fmt.Errorf("StartSystemd: %w", err)
		}
		if len(v1) == 0 {
			return nil, errors.New("StartSystemd: CgroupV1: the host has no cgroup v1 hierarchy")
		}
		for _, h := range v1 {
			args = append(args, "v:"+h.name+":"+h.options)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		return nil, fmt.Errorf("StartSystemd: %s must be empty (it is the instance's own and Close removes it): %v", dir, err)
	}
	sweepStaleSystemd(root, v1)

	s := &Systemd{dir: dir, pidfd: -1}
	if err := s.start(ctx, root, v1, args); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// bindArg checks a bind b of the instance in dir and returns its argument to bootScript.
func bindArg(dir, b string) (string, error) {
	if !filepath.IsAbs(b) || filepath.Clean(b) != b || b == "/" || strings.ContainsAny(b, "\n") {
		return "", fmt.Errorf("bind %q is not an absolute, clean path below /", b)
	}
	// The bind's target is made inside the new root by path: a symlink on the way could
	// lead it out to the host.
	if real, err := filepath.EvalSymlinks(b); err != nil || real != b {
		return "", fmt.Errorf("bind %q must be a path without symlinks (it resolves to %q, %v)", b, real, err)
	}
	if b == dir || strings.HasPrefix(b, dir+"/") || strings.HasPrefix(dir, b+"/") {
		return "", fmt.Errorf("bind %q overlaps the instance directory %s", b, dir)
	}
	fi, err := os.Stat(b)
	if err != nil {
		return "", fmt.Errorf("bind: %w", err)
	}
	if fi.IsDir() {
		return "d:" + b, nil
	}
	return "f:" + b, nil
}

func (s *Systemd) start(ctx context.Context, cgroupRoot string, v1 []cgroupV1Hierarchy, args []string) error {
	for _, d := range []string{"root", "rw"} {
		if err := os.Mkdir(filepath.Join(s.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(s.consoleLog(), nil, 0o644); err != nil {
		return err
	}
	self, err := readProcess(os.Getpid())
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s%d-%d-%d", systemdCgroupPrefix, self.pid, self.start, systemdSeq.Add(1))
	cg := filepath.Join(cgroupRoot, name)
	if err := os.Mkdir(cg, 0o755); err != nil {
		return fmt.Errorf("create cgroup: %w", err)
	}
	s.cgroup = cg
	// The v1 cgroups are joined by the shell that then execs unshare: the cgroup namespace
	// unshare makes is rooted at the cgroups it is in, in every hierarchy.
	join := []string{"-c", joinScript, "mk-systemd-join", strconv.Itoa(len(v1))}
	for _, h := range v1 {
		dir, err := h.create(name)
		s.v1Cgroups = append(s.v1Cgroups, dir) // before the error: Close removes what exists
		if err != nil {
			return err
		}
		join = append(join, filepath.Join(dir, "cgroup.procs"))
	}
	out, err := os.OpenFile(s.consoleLog(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer out.Close()

	// unshare starts in the new cgroup (clone3 places it there), so the cgroup namespace it
	// makes is rooted there and systemd's cgroups (init.scope, system.slice, ...) are made
	// below it, never at the host's cgroup2 root. --kill-child and Pdeathsig: if the test
	// process dies, unshare dies, and with it systemd and its whole PID namespace.
	cmd := exec.Command("/bin/sh", append(append(join, "/usr/bin/unshare", "--mount", "--pid", "--fork", "--kill-child=SIGKILL",
		"--cgroup", "--uts", "--ipc", "--propagation", "private", "/bin/sh"), args...)...)
	cmd.Env = systemdEnv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
	if err := StartInCgroup(cmd, cg); err != nil {
		return fmt.Errorf("start unshare: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(s.exited) }()

	// The join script execs unshare (same PID), whose child runs the boot script, then
	// pivot_root, chroot, then systemd: wait for the last exec.
	ctx, cancel := context.WithTimeout(ctx, systemdStartTimeout)
	defer cancel()
	for {
		children, _ := descendants(cmd.Process.Pid)
		for _, c := range children {
			if c.ppid == cmd.Process.Pid && procComm(c.pid) == "systemd" {
				// systemd cannot be reaped (and its PID reused) while unshare waits for it.
				pidfd, err := unix.PidfdOpen(c.pid, 0)
				if err != nil {
					return fmt.Errorf("pidfd_open systemd: %w", err)
				}
				s.pid, s.pidfd = c.pid, pidfd
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("systemd namespace setup failed (%v):\n%s", cmd.ProcessState, s.Log())
		case <-ctx.Done():
			return fmt.Errorf("systemd did not start: %w; log:\n%s", ctx.Err(), s.Log())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func procComm(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(b))
}

func (s *Systemd) consoleLog() string { return filepath.Join(s.dir, "console.log") }

// PID is systemd's process ID in the host's PID namespace (it is 1 inside).
func (s *Systemd) PID() int { return s.pid }

// Dir is the instance directory.
func (s *Systemd) Dir() string { return s.dir }

// Cgroup is the host path of the cgroup2 directory that is the namespace's cgroup root:
// Cgroup()+"/system.slice/x.service" is what systemd shows as /system.slice/x.service.
func (s *Systemd) Cgroup() string { return s.cgroup }

// CgroupsV1 are the host paths of the namespace's roots in the cgroup v1 hierarchies
// (SystemdOptions.CgroupV1; none without it). Close removes them.
func (s *Systemd) CgroupsV1() []string { return slices.Clone(s.v1Cgroups) }

// Log returns what systemd and the namespace setup wrote to their output and to /dev/console
// (systemd logs to its journal: see `journalctl` through Run for the rest).
func (s *Systemd) Log() string {
	b, _ := os.ReadFile(s.consoleLog())
	return string(b)
}

// Run runs argv in systemd's namespaces and root (nsenter -t PID -a -r -w) and returns its
// stdout. The error carries the exit status and stderr. If ctx ends first, the command's
// whole process group is killed. The command is in systemd's PID namespace but not in its
// cgroup: systemd-run --scope moves it into a scope of its own as it would on a host.
func (s *Systemd) Run(ctx context.Context, argv ...string) (string, error) {
	return s.run(ctx, "", argv...)
}

// RunInput is Run with stdin as the command's standard input.
func (s *Systemd) RunInput(ctx context.Context, stdin string, argv ...string) (string, error) {
	return s.run(ctx, stdin, argv...)
}

func (s *Systemd) run(ctx context.Context, stdin string, argv ...string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("Run: empty command")
	}
	s.mu.Lock()
	if s.pid == 0 || s.killed {
		s.mu.Unlock()
		return "", errors.New("Run: systemd is not running")
	}
	s.runs.Add(1)
	s.mu.Unlock()
	defer s.runs.Done()
	cmd := exec.CommandContext(ctx, "/usr/bin/nsenter", append([]string{"-t", strconv.Itoa(s.pid), "-a", "-r", "-w", "--"}, argv...)...)
	cmd.Env = systemdEnv
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// WaitRunning waits until `systemctl is-system-running` says running or degraded (the boot
// is over; degraded: some unit failed, see `systemctl --failed`), and fails if it says
// maintenance or stopping, or systemd exits. ("offline", systemctl's word for "cannot reach
// systemd", is what it says until systemd listens.)
func (s *Systemd) WaitRunning(ctx context.Context) error {
	var last string
	for {
		out, err := s.Run(ctx, "systemctl", "is-system-running")
		state := strings.TrimSpace(out)
		switch state {
		case "running", "degraded":
			return nil
		case "maintenance", "stopping":
			return fmt.Errorf("systemd is %s", state)
		}
		if err != nil {
			last = err.Error()
		} else {
			last = state
		}
		select {
		case <-s.exited:
			return fmt.Errorf("systemd exited during its boot (%v):\n%s", s.cmd.ProcessState, s.Log())
		case <-ctx.Done():
			return fmt.Errorf("systemd did not finish its boot: %w (last: %s)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close ends systemd and everything in its namespaces (cgroup.kill on its cgroup, which also
// ends the PID namespace and with it whatever Run started), removes its cgroup tree and its
// directory. Its mounts were made in its own mount namespace and are gone with it; Close
// checks that nothing is mounted below the directory on the host before removing it. It works
// whatever state a failed StartSystemd or test left, may be called again after an error to
// retry, and is a no-op once it has succeeded or on a nil *Systemd.
func (s *Systemd) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.killed = true
	var errs []error
	if s.pidfd >= 0 {
		// systemd first: its death ends its PID namespace, and unshare, still alive, reaps it
		// (killed after unshare, it would wait as a zombie for the host's init to reap it).
		if err := unix.PidfdSendSignal(s.pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("kill systemd: %w", err))
		}
		select {
		case <-s.exited:
		case <-time.After(systemdKillTimeout):
		}
		unix.Close(s.pidfd)
		s.pidfd = -1
	}
	if s.cgroup != "" {
		errs = append(errs, killCgroup2(s.cgroup, systemdKillTimeout))
	}
	if s.cmd != nil {
		select {
		case <-s.exited:
		case <-time.After(systemdKillTimeout):
			s.cmd.Process.Kill()
			errs = append(errs, fmt.Errorf("unshare (pid %d) did not exit after cgroup.kill", s.cmd.Process.Pid))
		}
	}
	// The death of systemd, PID 1 of the namespace, killed what Run started there: wait for
	// Run to reap it, so no zombie of the namespace outlives Close.
	runsDone := make(chan struct{})
	go func() { s.runs.Wait(); close(runsDone) }()
	select {
	case <-runsDone:
	case <-time.After(systemdKillTimeout):
		errs = append(errs, errors.New("commands started by Run did not end after systemd was killed"))
	}
	if s.cgroup != "" {
		if err := removeCgroupTree(s.cgroup, cgroupTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	// Every process of the namespace was in the cgroup2 tree killed above: the v1 trees
	// (systemd's slices, kubelet's kubepods, the containers' scopes) are empty.
	for _, dir := range s.v1Cgroups {
		if err := removeCgroupTree(dir, cgroupTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountAll(s.dir); err != nil {
		errs = append(errs, err)
	} else if mounts, err := mountsUnder(s.dir); err != nil || len(mounts) > 0 {
		errs = append(errs, fmt.Errorf("not removing %s: mounts remain below it", s.dir))
	} else if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	s.closed = err == nil
	return err
}

// cgroup2Mount is where the cgroup2 hierarchy is mounted (/sys/fs/cgroup/unified on a
// hybrid host).
func cgroup2Mount() (string, error) {
	mounts, err := readMounts()
	if err != nil {
		return "", err
	}
	for _, m := range mounts {
		if m.fsType == "cgroup2" {
			return m.mountPoint, nil
		}
	}
	return "", errors.New("no cgroup2 hierarchy is mounted")
}

// killCgroup2 kills every process in the cgroup2 directory dir and below (cgroup.kill) and
// waits until it is empty. A missing cgroup is not an error.
func killCgroup2(dir string, timeout time.Duration) error {
	err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill cgroup %s: %w", dir, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		ev, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if errors.Is(err, fs.ErrNotExist) || (err == nil && strings.Contains(string(ev), "populated 0")) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %s after cgroup.kill", dir, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweepStaleSystemd removes the cgroups of StartSystemd whose owner process is gone. Their
// processes died with the owner (parent-death signal); a survivor is killed. v1 are the v1
// hierarchies where the caller's instance makes cgroups (where a dead instance of the same
// kind of caller left them). Best-effort.
func sweepStaleSystemd(cgroupRoot string, v1 []cgroupV1Hierarchy) {
	dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, systemdCgroupPrefix+"*"))
	for _, d := range dirs {
		if ownerGone(d) && killCgroup2(d, systemdKillTimeout) == nil {
			_ = removeCgroupTree(d, cgroupTimeout)
		}
	}
	for _, h := range v1 {
		dirs, _ := filepath.Glob(filepath.Join(h.parent(), systemdCgroupPrefix+"*"))
		for _, d := range dirs {
			if ownerGone(d) {
				_ = removeCgroupTree(d, cgroupTimeout)
			}
		}
	}
}

// ownerGone says whether the cgroup d of StartSystemd names an owner process that is gone.
func ownerGone(d string) bool {
	f := strings.Split(strings.TrimPrefix(filepath.Base(d), systemdCgroupPrefix), "-")
	if len(f) != 3 {
		return false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	return err1 == nil && err2 == nil && !sameProcess(process{pid: pid, start: start})
}
