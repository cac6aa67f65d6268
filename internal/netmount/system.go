package netmount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// system is what the Manager does to the host; liveSystem does it, tests use a fake. Every
// method that may touch a network filesystem takes a context that bounds it.
type system interface {
	// preflight checks that the node can mount s (see Preflight).
	preflight(s netspec.Spec) error
	// mount mounts s at target in the scope unit, and returns once the mount is in mountinfo.
	// ctx bounds it; timeout is ctx's, for the message.
	mount(ctx context.Context, s netspec.Spec, unit, target string, timeout time.Duration) error
	// mountsBelow lists the mount points below dir (from mountinfo: nothing is touched).
	mountsBelow(dir string) (map[string]bool, error)
	// isMounted says whether target is a mount point (from mountinfo: nothing is touched).
	isMounted(target string) (bool, error)
	// probe stats target, where s is mounted, within ProbeTimeout: nil if the filesystem
	// answers, an error wrapping bounded.ErrNoAnswer if it does not, or if it was not started
	// because a probe of the same path or kernel client's server is stuck (probeKey).
	probe(s netspec.Spec, target string) error
	// stuckCalls counts the probes that overran their wait and still run, each an OS thread
	// hung on a dead filesystem, by server (probeKey's Tag).
	stuckCalls() map[string]int
	// unmount unmounts target, lazily (umount -l) if lazy, within ctx.
	unmount(ctx context.Context, target string, lazy bool) error
	// removeScope removes the scope of unit once it is empty.
	removeScope(unit string) error
	// scopes lists the units whose scopes exist (nil where the scoper cannot tell).
	scopes() ([]string, error)
	// killScope kills what is left in the scope of unit: what a failed mount attempt left (a
	// FUSE daemon that detached and then hung), or a dead mount's hung daemon before the
	// mount is replaced.
	killScope(unit string) error
	// makeShared makes dir a shared mount of its own peer group (binding it onto itself if it
	// is no mount point), so that containers can have rslave or rshared binds of what is
	// mounted below it.
	makeShared(dir string) error
}

// liveSystem acts on the host.
type liveSystem struct {
	env    Env
	scoper Scoper
}

var _ system = (*liveSystem)(nil)

func (l *liveSystem) preflight(s netspec.Spec) error { return Preflight(l.env, s) }

// maxOutput bounds what is read of a helper's output for an error message.
const maxOutput = 4096

func (l *liveSystem) mount(ctx context.Context, s netspec.Spec, unit, target string, timeout time.Duration) error {
	mountCmd, err := l.env.LookPath("mount")
	if err != nil {
		return err
	}
	argv := []string{mountCmd, "-t", s.Type}
	if len(s.Options) > 0 {
		argv = append(argv, "-o", strings.Join(s.Options, ","))
	}
	argv = append(argv, s.Source, target)

	// The helper's output goes to a memory file: a pipe would be held open by the FUSE
	// daemon's ssh long after mount(8) exits (see Job).
	fd, err := unix.MemfdCreate("mountkeeper-mount-output", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("create a buffer for the helper's output: %w", err)
	}
	out := os.NewFile(uintptr(fd), "mount-output")
	defer out.Close()

	start := time.Now()
	cmd, err := l.scoper.Start(ctx, Job{Unit: unit, Description: "mountkeeper: " + s.String(), Argv: argv, Stdout: out, Stderr: out})
	if err != nil {
		return err
	}
	werr := cmd.Wait()
	if st, ok := l.scoper.(scopeSettler); ok && werr == nil {
		// The helper is gone and the daemon it left runs: move whatever it forked while
		// the scope was being set up (sshfs's ssh, say) out of the agent's groups too.
		if err := st.Settle(unit); err != nil {
			fmt.Fprintf(os.Stderr, "mountkeeper: mount %s: %v\n", unit, err)
		}
	}
	buf := make([]byte, maxOutput)
	n, _ := out.ReadAt(buf, 0)
	text := s.Redact(strings.TrimSpace(string(buf[:n])))
	if ctx.Err() != nil {
		return fmt.Errorf("mount did not finish within %s (helper killed)%s", timeout, colonText(text))
	}
	if werr != nil {
		var ee *exec.ExitError
		if errors.As(werr, &ee) && ee.ExitCode() == 32 && helperMissingText(text) {
			// Preflight ran before this mount and passed; what does it say now?
			if perr := l.preflight(s); perr != nil {
				return perr
			}
			return fmt.Errorf("mount: %v: %s (though the preflight found the helper and kernel support for %s)", werr, text, s.Type)
		}
		return fmt.Errorf("mount: %v%s", werr, colonText(text))
	}
	// A FUSE helper may exit before the kernel shows the mount: wait for it briefly.
	for {
		ok, err := l.isMounted(target)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("mount exited 0 after %s but %s did not appear in mountinfo within %s%s",
				time.Since(start).Round(time.Millisecond), target, timeout, colonText(text))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func colonText(text string) string {
	if text == "" {
		return ""
	}
	return ": " + text
}

func (l *liveSystem) mountsBelow(dir string) (map[string]bool, error) {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	out := make(map[string]bool, len(infos))
	for _, i := range infos {
		if i.Mountpoint != dir {
			out[i.Mountpoint] = true
		}
	}
	return out, nil
}

func (l *liveSystem) isMounted(target string) (bool, error) {
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
	if err != nil {
		return false, fmt.Errorf("read mountinfo: %w", err)
	}
	return len(infos) > 0, nil
}

// probes bounds the probes running at once, stuck ones included, and lets one at most run per
// path, and per server of a kernel client (probeKey): a stat of a dead server's mount may
// never return, and is left behind counted here, not started again while it hangs. One group
// for the process: the threads it bounds are the process's.
var probes = bounded.NewGroup(64)

func (l *liveSystem) stuckCalls() map[string]int { return probes.Stuck() }

func (l *liveSystem) probe(s netspec.Spec, target string) error {
	// The mount on top at target and the address its kernel client talks to, from mountinfo
	// (nothing is touched); none if target is not mounted (yet).
	var top mountRef
	if infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target)); err == nil && len(infos) > 0 {
		top = mountRef{ID: infos[len(infos)-1].ID, SuperOptions: infos[len(infos)-1].VFSOptions}
	}
	_, err := bounded.Do(probes, ProbeTimeout, probeKey(s, target, top),
		"stat "+target, func() (struct{}, error) {
			// Forced to the server: a kernel client (NFS) answers a plain stat of its root from
			// its attribute cache for up to a minute, and would not see its root's file handle
			// gone stale (ESTALE: the export re-created) until then. STATX_MODE: NFS asks its
			// server nothing for STATX_TYPE alone, forced or not.
			var stx unix.Statx_t
			if err := unix.Statx(unix.AT_FDCWD, target, unix.AT_STATX_FORCE_SYNC, unix.STATX_MODE, &stx); err != nil {
				return struct{}{}, &os.PathError{Op: "stat", Path: target, Err: err}
			}
			return struct{}{}, nil
		})
	return err
}

func (l *liveSystem) unmount(ctx context.Context, target string, lazy bool) error {
	if lazy {
		return l.umount(ctx, target, "-l")
	}
	return l.umount(ctx, target)
}

func (l *liveSystem) forceUnmount(ctx context.Context, target string) error {
	return l.umount(ctx, target, "-f")
}

// umount runs umount(8) with flags on target, within ctx.
func (l *liveSystem) umount(ctx context.Context, target string, flags ...string) error {
	umount, err := l.env.LookPath("umount")
	if err != nil {
		return err
	}
	args := append(flags, target)
	cmd := exec.CommandContext(ctx, umount, args...)
	cmd.Env = withPath(os.Environ())
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("umount %s: %w in time", target, bounded.ErrNoAnswer)
	}
	if err != nil {
		if ok, ierr := l.isMounted(target); ierr == nil && !ok {
			return nil // gone already
		}
		return fmt.Errorf("umount %s: %v: %s", target, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (l *liveSystem) removeScope(unit string) error { return l.scoper.Remove(unit) }

// scopeSettler is a Scoper that, once the helper exited, can move every process left in a
// scope into the scope's own groups everywhere (CgroupScoper: the cgroup v1 hierarchies).
type scopeSettler interface {
	Settle(unit string) error
}

// scopeLister is a Scoper that can list its scopes (CgroupScoper can; systemd collects the
// scopes of finished units itself).
type scopeLister interface {
	Units() ([]string, error)
}

func (l *liveSystem) scopes() ([]string, error) {
	if sl, ok := l.scoper.(scopeLister); ok {
		return sl.Units()
	}
	return nil, nil
}

// scopeKiller is a Scoper that can kill what runs in a scope (CgroupScoper can; a systemd
// scope is named with a suffix only systemd-run knows, and --collect cleans it).
type scopeKiller interface {
	Kill(unit string) error
}

func (l *liveSystem) killScope(unit string) error {
	if k, ok := l.scoper.(scopeKiller); ok {
		return k.Kill(unit)
	}
	return nil
}

func (l *liveSystem) makeShared(dir string) error {
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	if len(infos) == 0 {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", dir, err)
		}
		// A bind of a directory on a shared mount joins that mount's peer group: leave it,
		// so that what is mounted here is not mounted again, hidden, below the parent.
		if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make %s private: %w", dir, err)
		}
	} else if strings.Contains(infos[len(infos)-1].Optional, "shared:") {
		return nil // an earlier agent's: making it private would cut containers off it
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}
