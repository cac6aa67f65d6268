package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// criCleanupTimeout bounds the polite part of Close: removing pods through CRI.
	criCleanupTimeout = 60 * time.Second
	// killTimeout and cgroupTimeout bound the forceful part.
	killTimeout   = 10 * time.Second
	cgroupTimeout = 10 * time.Second
	// cgroupKillTimeout bounds how long a Cgroup2's processes may take to exit after
	// cgroup.kill.
	cgroupKillTimeout = 30 * time.Second
)

// Close stops everything the instance started and removes what it created: all pods and
// containers (through CRI while containerd answers, then by killing shims and container
// processes), containerd itself and the NRI plugins it launched, every mount below Dir()
// (deepest first, lazily if busy), the pods' cgroups in every hierarchy, and Dir().
//
// It works whatever state a failed test left behind, may be called again after an error to
// retry, and is a no-op once it has succeeded or on a nil *Containerd. Dir() is only removed
// once nothing is mounted below it, so a leftover bind mount can never lead to deleting the
// files it shows.
func (c *Containerd) Close() error {
	if c == nil {
		return nil
	}
	return c.close()
}

// instance is what a containerd and a CRI-O instance both hold: the running daemon and what
// Close tears down.
type instance struct {
	opts   Options
	layout layout
	cri    *Client

	mu     sync.Mutex
	daemon runtimeDaemon // nil while stopped
	log    *logSink
	closed bool // Close finished cleaning up
	// ownsDefaultCgroups: a kubelet runs on the instance and /k8s.io did not exist before it
	// (StartKubeNode), so Close removes it once empty (see defaultCgroupNamespace).
	ownsDefaultCgroups bool
}

// setDaemon records the daemon just started.
func (in *instance) setDaemon(d runtimeDaemon) {
	in.mu.Lock()
	in.daemon = d
	in.mu.Unlock()
}

// takeDaemon forgets the running daemon and returns it, nil when it is stopped.
func (in *instance) takeDaemon() runtimeDaemon {
	in.mu.Lock()
	defer in.mu.Unlock()
	d := in.daemon
	in.daemon = nil
	return d
}

// Stop stops the daemon (containerd, crio) with SIGTERM, as a crash or an upgrade would;
// Containerd.Start starts it again. Shims (conmon) and containers keep running.
func (in *instance) Stop() error { return stopDaemon(in.takeDaemon()) }

// stopDaemon stops d, if there is one.
func stopDaemon(d runtimeDaemon) error {
	if d == nil {
		return nil
	}
	return d.stop(stopTimeout)
}

// close is Close of either runtime: shutdown once, again only after a failed teardown.
func (in *instance) close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil
	}
	d := in.daemon
	in.daemon = nil
	err := in.shutdown(d)
	if in.ownsDefaultCgroups {
		err = errors.Join(err, removeCgroupIfEmpty(defaultCgroupNamespace))
	}
	in.closed = !errors.Is(err, errTeardown)
	return err
}

// errTeardown marks an error of teardown itself: the instance is not gone, Close may retry.
var errTeardown = errors.New("teardown")

// shutdown is the Close of a runtime instance (containerd or CRI-O) whose daemon d, taken
// from it under in.mu, is stopped here: its pods through CRI while the daemon answers, the
// daemon, every process it started (NRI plugins launched from plugin_path may live outside
// the instance's directory; only their parent tells they belong to it), then teardown (which
// the sweep of a crashed instance calls alone, on its layout). An error of teardown wraps
// errTeardown.
func (in *instance) shutdown(d runtimeDaemon) error {
	var errs []error
	var children []process
	if d != nil && !d.exited() {
		if in.cri != nil {
			ctx, cancel := context.WithTimeout(context.Background(), criCleanupTimeout)
			errs = append(errs, in.cri.removeAllPods(ctx))
			cancel()
		}
		var err error
		children, err = descendants(d.pid())
		errs = append(errs, err)
	}
	errs = append(errs, stopDaemon(d))
	if in.cri != nil {
		errs = append(errs, in.cri.close())
	}
	in.log.detach()
	// Once the directory is gone its name may be reused by another instance: never tear
	// down again after that, even if the polite part above reported an error.
	if err := teardown(in.layout, children); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", errTeardown, err))
	}
	return errors.Join(errs...)
}

// teardown removes what is left of an instance once containerd is stopped (or gone with a
// crashed test): processes, mounts, cgroups, then the directory. extra are processes known
// to belong to the instance that neither name its directory nor sit in its cgroups.
func teardown(l layout, extra []process) error {
	cgroups := append([]string{l.cgroupParent()}, l.defaultCgroups()...)
	// Container processes first, while their shims are alive to reap them; killed after
	// their shim they would wait as zombies for PID 1.
	errs := []error{
		killAll(func(p process) bool { return slices.ContainsFunc(cgroups, p.inCgroup) }, killTimeout),
		killAll(func(p process) bool { return p.mentions(l.dir) || isOneOf(p, extra) }, killTimeout),
		unmountAll(l.dir),
	}
	for _, cg := range cgroups {
		errs = append(errs, removeCgroups(cg, cgroupTimeout))
	}
	if mounts, err := mountsUnder(l.dir); err != nil || len(mounts) > 0 {
		errs = append(errs, fmt.Errorf("not removing %s: mounts remain below it", l.dir))
	} else if err := os.RemoveAll(l.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove instance directory: %w", err))
	}
	return errors.Join(errs...)
}

func isOneOf(p process, list []process) bool {
	for _, q := range list {
		if p.pid == q.pid && p.start == q.start {
			return true
		}
	}
	return false
}

// writeOwner records which process owns the instance, so a later Start can tell an
// instance whose test process died (timeout panic, SIGKILL) from one still in use.
func writeOwner(l layout) error { return writeOwnerFile(l.owner()) }

// writeOwnerFile records the calling process (pid and start time) in the file at path.
func writeOwnerFile(path string) error {
	self, err := readProcess(os.Getpid())
	if err != nil {
		return fmt.Errorf("read own process: %w", err)
	}
	data := fmt.Sprintf("%d %d\n", self.pid, self.start)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ownerAlive reports whether the process recorded by writeOwner still runs. A directory
// without a readable owner file is not one of ours, or is still being set up: treat it as
// alive and leave it alone.
func ownerAlive(l layout) bool { return ownerFileAlive(l.owner()) }

// ownerFileAlive reports whether the process recorded in the file at path still runs (true
// without a readable record).
func ownerFileAlive(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return true
	}
	pid, err1 := strconv.Atoi(fields[0])
	start, err2 := strconv.ParseUint(fields[1], 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	return sameProcess(process{pid: pid, start: start})
}

// instanceDirName is what Start's os.MkdirTemp makes; other test directories that merely
// share the prefix are never swept.
var instanceDirName = regexp.MustCompile(`^` + instanceDirPrefix + `[0-9]+$`)

// sweepStale tears down instances left by test processes that died without Close. It is
// best-effort: a failure here must not fail an unrelated test.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(instanceParent, instanceDirPrefix+"*"))
	for _, dir := range dirs {
		l := layout{dir: dir}
		if instanceDirName.MatchString(filepath.Base(dir)) && !ownerAlive(l) {
			_ = teardown(l, nil)
		}
	}
}
