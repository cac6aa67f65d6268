package netmount

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// statdUnit is the scope of the node's NFS lock status daemon (rpc.statd) when mountkeeper
// starts it without systemd. It belongs to no mount and is never removed with one.
const statdUnit = "rpc-statd"

// needsStatd says whether mounting s may make mount.nfs start rpc.statd, the node's NFSv3
// lock status daemon: an "nfs" mount of version 2 or 3, or of no stated version (mount.nfs
// falls back to v3 when the server has no v4), unless locking is local (nolock,
// local_lock=all or posix). nfs4 and vers=4.x mounts lock in the protocol and need no statd.
func needsStatd(s netspec.Spec) bool {
	if s.Type != "nfs" {
		return false
	}
	version := ""
	for _, o := range s.Options {
		k, v, _ := strings.Cut(o, "=")
		switch {
		case o == "nolock", k == "local_lock" && (v == "all" || v == "posix"):
			return false
		case k == "vers" || k == "nfsvers":
			version = v
		case o == "v2" || o == "v3" || o == "v4":
			version = o[1:]
		}
	}
	return version == "" || version == "2" || version == "3"
}

// ensureStatd starts the node's rpc.statd before a mount of s that needs it (needsStatd), so
// that mount.nfs finds it running and does not start it in the mount's scope. A failure is
// logged: mount.nfs then tries itself.
func ensureStatd(ctx context.Context, sys system, log *logrus.Logger, s netspec.Spec) {
	st, ok := sys.(statdStarter)
	if !ok || !needsStatd(s) {
		return
	}
	if err := st.startStatd(ctx); err != nil {
		log.WithError(err).WithFields(logrus.Fields{"mount": s.Key(), "spec": s.String()}).
			Warn("netmount: cannot start rpc.statd in a scope of its own: mount.nfs will start it in the mount's scope")
	}
}

// statdStarter starts the node's rpc.statd where it belongs before a mount that needs it.
// Without it, mount.nfs runs start-statd itself, and without systemd the daemon lands in the
// cgroup of whoever ran mount.nfs: the one mount's scope, so the node's lock daemon would
// live and die with that mount (and keep its scope from being removed). liveSystem implements
// it; the tests' fake systems need not.
type statdStarter interface {
	startStatd(ctx context.Context) error
}

// startStatd runs the node's rpc.statd unless it runs already: with systemd through its
// unit (rpc-statd.service, nfs-common's and nfs-utils'), else through nfs-common's
// start-statd in a scope of its own (statdUnit), which no release removes. start-statd is
// idempotent (it checks /run/rpc.statd.pid under a lock) and returns once the daemon is
// ready. Without start-statd nothing is done: mount.nfs then reports what is missing.
func (l *liveSystem) startStatd(ctx context.Context) error {
	if sd, ok := l.scoper.(*SystemdScoper); ok {
		systemctl := filepath.Join(filepath.Dir(sd.Run), "systemctl")
		out, err := exec.CommandContext(ctx, systemctl, "start", "rpc-statd.service").CombinedOutput()
		if err != nil {
			return fmt.Errorf("systemctl start rpc-statd.service: %v%s", err, colonText(strings.TrimSpace(string(out))))
		}
		return nil
	}
	startStatd, err := l.env.LookPath("start-statd")
	if err != nil {
		return nil
	}
	out, err := os.CreateTemp("", "mountkeeper-statd-")
	if err != nil {
		return err
	}
	os.Remove(out.Name())
	defer out.Close()
	cmd, err := l.scoper.Start(ctx, Job{Unit: statdUnit, Description: "mountkeeper: the node's NFS lock status daemon (rpc.statd)",
		Argv: []string{startStatd}, Stdout: out, Stderr: out})
	if err != nil {
		return err
	}
	if werr := cmd.Wait(); werr != nil {
		buf := make([]byte, maxOutput)
		n, _ := out.ReadAt(buf, 0)
		return fmt.Errorf("%s: %v%s", startStatd, werr, colonText(strings.TrimSpace(string(buf[:n]))))
	}
	return nil
}
