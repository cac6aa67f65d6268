// Package nodecleanup is `mountkeeper node cleanup`: what an uninstall (the DaemonSet's, or an
// operator by hand) does to the node once the agent is stopped. It releases the network mounts
// the agent left and their scopes, unmounts the tmpfs of subPath copies (they may hold
// secrets) with the live copies' mounts on it, removes the guard key and whatever else the
// agent wrote in its state directory (by name: layout.go), and the directory once nothing
// else is in it; it refuses to remove what a running container still uses, and says which
// container (process, cgroup) holds it: see ProcHolders for how it knows. The runtime's
// config is `mountkeeper runtime unconfigure`'s.
//
// Like internal/runtimeconfig it plans, then applies: gather reads what the node holds
// (Facts), plan decides from those values alone what to do (Plan: pure, table-tested), and
// apply takes the steps through a small interface of side effects (node; liveNode on the
// host); a dry run prints the plan.
package nodecleanup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
)

// Defaults of Options.
const (
	DefaultLockWait       = 2 * time.Second
	DefaultUnmountTimeout = 10 * time.Second
)

// Options configures a cleanup.
type Options struct {
	// StateDir is the agent's state directory (configs.Config.StateDir).
	StateDir string
	// DryRun reports what would be done and changes nothing.
	DryRun bool
	// LockWait is how long to wait for a running agent to release the state directory.
	LockWait time.Duration
	// UnmountTimeout bounds each unmount.
	UnmountTimeout time.Duration
	// Holders finds who holds a mount; nil means ProcHolders{}.
	Holders Holders
	// Scoper is the network mounts' scoper; nil means netmount.DetectScoper().
	Scoper netmount.Scoper
	// Out receives one line per thing done (or that would be done), for people.
	Out io.Writer
}

// Kept is what the cleanup left because it is in use, and by whom.
type Kept struct {
	What    string // "network mount fuse.sshfs root@srv:/x", "subPath copies (tmpfs)", "scope mount-<key>"
	Path    string
	Holders []Holder
	Pids    []int // for a scope: the processes still in it
}

func (k Kept) String() string {
	var by []string
	for _, h := range k.Holders {
		by = append(by, h.String())
	}
	for _, pid := range k.Pids {
		by = append(by, fmt.Sprintf("pid %d still runs in it", pid))
	}
	return fmt.Sprintf("%s at %s: %s", k.What, k.Path, strings.Join(by, "; "))
}

// InUseError is the cleanup's answer when something was kept: everything else is done, and the
// state directory (with the guard key) stays for what is left. Running the cleanup again once those containers are
// gone finishes it.
type InUseError struct{ Kept []Kept }

func (e *InUseError) Error() string {
	lines := make([]string, len(e.Kept))
	for i, k := range e.Kept {
		lines[i] = "  " + k.String()
	}
	return fmt.Sprintf("node cleanup: %d kept because a running container still uses it (the state directory stays; "+
		"run the cleanup again once they are gone):\n%s", len(e.Kept), strings.Join(lines, "\n"))
}

// Run cleans the node up after the agent; see the package comment. It fails without changing
// anything while an agent runs on the state directory. It reads what there is (gather), plans
// from that alone what to do (plan), and prints the plan (DryRun) or applies it.
func Run(ctx context.Context, o Options) error {
	return run(ctx, o, nil)
}

// run is Run with the side effects of n (nil: the live node's).
func run(ctx context.Context, o Options, n node) error {
	o.LockWait = cmp.Or(o.LockWait, DefaultLockWait)
	o.UnmountTimeout = cmp.Or(o.UnmountTimeout, DefaultUnmountTimeout)
	if o.Holders == nil {
		o.Holders = ProcHolders{}
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	dir, err := filepath.EvalSymlinks(o.StateDir)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(o.Out, "nothing to clean: %s does not exist\n", o.StateDir)
		return nil
	}
	if err != nil {
		return err
	}
	lock, err := netmount.LockStateDir(dir, o.LockWait)
	if err != nil {
		return fmt.Errorf("node cleanup: %w: stop the agent first (the DaemonSet's uninstall deletes it before the cleanup)", err)
	}
	defer lock.Close()

	facts, err := gather(dir, o.Holders)
	if err != nil {
		return fmt.Errorf("node cleanup: %w", err)
	}
	scoper := o.Scoper
	if scoper == nil {
		// Needed to release a network mount; without one (no cgroup2, no systemd) there are
		// no scopes to look for either.
		if scoper, err = netmount.DetectScoper(); err != nil && len(facts.Network) > 0 {
			return err
		}
	}
	facts.Scopes = scoper != nil
	p := plan(facts)
	if o.DryRun {
		return p.print(o.Out)
	}
	if n == nil {
		n = liveNode{scoper: scoper, unmountTimeout: o.UnmountTimeout}
	}
	return apply(ctx, p, n, o.Out)
}
