package nodecleanup

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
)

// node is the cleanup's side effects (liveNode on the running host).
type node interface {
	// releaseNetwork unmounts hm (never lazily) and removes its files and scope.
	releaseNetwork(ctx context.Context, stateDir string, hm netmount.HostMount) error
	// leftoverScopes removes the empty scopes of stateDir's mounts left without a mount and
	// returns the others, with the processes in them.
	leftoverScopes(stateDir string) (busy map[string][]int, err error)
	// unmountCopy unmounts c if it is the mount on top at its path; lazily (saying so) if
	// something of this mount namespace still uses it.
	unmountCopy(c copyMount) (lazy bool, err error)
	// unmountOwn unmounts path, mounts/ or staging/ bound onto itself.
	unmountOwn(path string) error
	// remove removes r below stateDir, no link followed; a directory that is not empty
	// stays (notEmpty).
	remove(stateDir string, r removal) (notEmpty bool, err error)
}

// apply takes the steps of p with n, telling out each. A failed Release step does not stop
// the others, except in the copy tree: what sits below a mount that could not be unmounted
// stays busy, and a lazy detach of it would take the failed one along unseen. The Remove
// steps are taken only if nothing was kept, failed or refused (Plan.blocked); a later run
// plans again from what is left.
func apply(ctx context.Context, p Plan, n node, out io.Writer) error {
	kept := p.Kept
	var failed []error
	lazily, copyFailed := 0, false
	for _, a := range p.Release {
		if a.Kind == UnmountCopy && copyFailed {
			continue
		}
		fmt.Fprintln(out, a)
		switch a.Kind {
		case ReleaseNetwork:
			if err := n.releaseNetwork(ctx, p.Dir, a.Network); err != nil {
				failed = append(failed, err)
			}
		case EndScopes:
			busy, err := n.leftoverScopes(p.Dir)
			if err != nil {
				failed = append(failed, err)
			}
			for _, unit := range slices.Sorted(maps.Keys(busy)) {
				kept = append(kept, Kept{What: "scope " + unit + " (its host mount is gone; a container may still hold its filesystem)",
					Path: unit, Pids: busy[unit]})
			}
		case UnmountCopy:
			lazy, err := n.unmountCopy(a.Copy)
			if err != nil {
				failed, copyFailed = append(failed, err), true
			}
			if lazy {
				lazily++
				fmt.Fprintf(out, "lazily detached %s: it is still in use in this mount namespace (an open file or a working directory); its memory is freed when that ends\n", a.Copy.describe())
			}
		}
	}
	if lazily > 0 {
		fmt.Fprintf(out, "%d subPath copy mounts lazily detached\n", lazily)
	}
	if err := p.blocked(kept, failed); err != nil {
		return err
	}
	p.printForeign(out, "")
	for _, a := range p.Remove {
		fmt.Fprintln(out, a)
		var err error
		switch a.Kind {
		case UnmountOwn:
			err = n.unmountOwn(a.Path)
		case Remove:
			var notEmpty bool
			notEmpty, err = n.remove(p.Dir, a.Removal)
			if notEmpty {
				fmt.Fprintf(out, "left %s in place: it holds what is not mountkeeper's\n", a.Path)
			}
		}
		if err != nil {
			return fmt.Errorf("node cleanup: %w", err)
		}
	}
	if len(p.Foreign) > 0 { // then "." is not among the removals
		fmt.Fprintf(out, "left the state directory %s in place: it holds what is not mountkeeper's\n", p.Dir)
	}
	return nil
}
