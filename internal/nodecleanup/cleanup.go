// Package nodecleanup is `mountkeeper node cleanup`: what an uninstall (the DaemonSet's, or an
// operator by hand) does to the node once the agent is stopped. It releases the network mounts
// the agent left and their scopes, unmounts the tmpfs of subPath copies (they may hold
// secrets), removes the guard key and the state directory; it refuses to remove what a
// running container still uses, and says which container (process, cgroup) holds it: see
// ProcHolders for how it knows. The runtime's config is `mountkeeper runtime unconfigure`'s.
package nodecleanup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/guard"
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
// anything while an agent runs on the state directory.
func Run(ctx context.Context, o Options) error {
	o.LockWait = cmp.Or(o.LockWait, DefaultLockWait)
	o.UnmountTimeout = cmp.Or(o.UnmountTimeout, DefaultUnmountTimeout)
	if o.Holders == nil {
		o.Holders = ProcHolders{}
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	say := func(format string, args ...any) {
		if o.DryRun {
			format = "would: " + format
		}
		fmt.Fprintf(o.Out, format+"\n", args...)
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

	network, err := netmount.HostMounts(dir)
	if err != nil {
		return err
	}
	copies := filepath.Join(dir, "subpath")
	copyInfos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(copies))
	if err != nil {
		return err
	}
	copyOrder, copyForeign := copyTree(copyInfos, copies)
	copiesDev, copiesMounted := "", len(copyInfos) > 0
	if top := topAt(copyInfos, copies); top != nil {
		copiesDev = fmt.Sprintf("%d:%d", top.Major, top.Minor)
	}
	devices := make([]string, 0, len(network)+1)
	for _, hm := range network {
		devices = append(devices, hm.Device)
	}
	if copiesMounted {
		devices = append(devices, copiesDev)
	}
	holders, err := o.Holders.Holders(devices)
	if err != nil {
		return fmt.Errorf("node cleanup: find the containers that use the mounts: %w", err)
	}

	var kept []Kept
	var errs []error
	scoper := o.Scoper
	if scoper == nil && len(network) > 0 {
		if scoper, err = netmount.DetectScoper(); err != nil {
			return err
		}
	}
	for _, hm := range network {
		what := "network mount " + cmp.Or(hm.Spec, hm.FSType+" (no state file)")
		if h := holders[hm.Device]; len(h) > 0 {
			kept = append(kept, Kept{What: what, Path: hm.Path, Holders: h})
			continue
		}
		say("release %s at %s and its scope", what, hm.Path)
		if !o.DryRun {
			if err := netmount.ReleaseHostMount(ctx, dir, hm, scoper, o.UnmountTimeout); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if scoper == nil {
		scoper, _ = netmount.DetectScoper() // nil without cgroup2 or systemd: no scopes to find
	}
	if scoper != nil && !o.DryRun {
		busy, err := netmount.LeftoverScopes(dir, scoper)
		errs = append(errs, err)
		for _, unit := range slices.Sorted(maps.Keys(busy)) {
			kept = append(kept, Kept{What: "scope " + unit + " (its host mount is gone; a container may still hold its filesystem)",
				Path: unit, Pids: busy[unit]})
		}
	}
	if copiesMounted {
		switch h := holders[copiesDev]; {
		case len(h) > 0:
			kept = append(kept, Kept{What: "subPath copies (tmpfs)", Path: copies, Holders: h})
		case len(copyForeign) > 0:
			errs = append(errs, fmt.Errorf("%s holds mounts that are not mountkeeper's (%s): unmount them, then run the cleanup again",
				copies, strings.Join(copyForeign, ", ")))
		default:
			errs = append(errs, unmountCopies(copyOrder, o.DryRun, say))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node cleanup: %w", err)
	}
	if len(kept) > 0 {
		// The guard key stays with the state directory: the containers named still run on
		// a node whose guard (the runtime wrapper, still in place until unconfigure) checks
		// their pods' next containers against it. It goes with the run that finishes.
		return &InUseError{Kept: kept}
	}
	return removeStateDir(dir, o.DryRun, say)
}

// removeStateDir unmounts the agent's own mounts below dir (mounts/ and staging/, each bound
// onto itself to set its propagation) and removes what the agent made in dir (stateLayout),
// and dir once nothing else is left; any other mount below it stops the removal.
func removeStateDir(dir string, dry bool, say func(string, ...any)) error {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	own := map[string]bool{filepath.Join(dir, "mounts"): true, filepath.Join(dir, "staging"): true}
	var others []string
	for _, i := range infos {
		if !own[i.Mountpoint] && i.Mountpoint != dir {
			others = append(others, i.Mountpoint)
		}
	}
	if len(others) > 0 {
		return fmt.Errorf("node cleanup: %s keeps mounts that are not the agent's (%s): unmount them, then run the cleanup again",
			dir, strings.Join(others, ", "))
	}
	entries, err := listState(dir)
	if err != nil {
		return fmt.Errorf("node cleanup: %w", err)
	}
	remove, foreign := sweep(entries)
	for _, rel := range foreign {
		say("keep %s: not mountkeeper's", filepath.Join(dir, rel))
	}
	for _, i := range infos {
		if own[i.Mountpoint] {
			say("unmount %s (bound onto itself)", i.Mountpoint)
			if !dry {
				if err := unix.Unmount(i.Mountpoint, 0); err != nil && !errors.Is(err, unix.EINVAL) {
					return fmt.Errorf("node cleanup: unmount %s: %w", i.Mountpoint, err)
				}
			}
		}
	}
	for _, r := range remove {
		path := filepath.Join(dir, r.Rel)
		switch r.Rel {
		case guard.KeyFile:
			say("remove the guard key %s", path)
		case ".":
			say("remove the state directory %s", dir)
		default:
			say("remove %s", path)
		}
		if dry {
			continue
		}
		notEmpty, err := removeBeneath(dir, r)
		if err != nil {
			return fmt.Errorf("node cleanup: %w", err)
		}
		if notEmpty {
			say("left %s in place: it holds what is not mountkeeper's", path)
		}
	}
	if len(foreign) > 0 {
		say("left the state directory %s in place: it holds what is not mountkeeper's", dir)
	}
	return nil
}

// unmountCopies unmounts the copy tree in order (copyTree), the live copies' layers and bases
// before the tmpfs under them, and stops at the first that fails: what sits below it would
// stay busy, and a later run starts again from what is left.
func unmountCopies(order []copyMount, dry bool, say func(string, ...any)) error {
	lazily := 0
	for _, c := range order {
		if !c.Layer {
			say("unmount the subPath copies' tmpfs at %s (its copies, secrets among them, go with it)", c.Path)
		} else {
			say("unmount %s", c.describe())
		}
		if dry {
			continue
		}
		lazy, err := unmountCopy(c)
		if err != nil {
			return err
		}
		if lazy {
			lazily++
			say("lazily detached %s: it is still in use in this mount namespace (an open file or a working directory); its memory is freed when that ends", c.describe())
		}
	}
	if lazily > 0 {
		say("%d subPath copy mounts lazily detached", lazily)
	}
	return nil
}
