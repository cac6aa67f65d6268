package nodecleanup

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/internal/guard"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
)

// Plan is what the cleanup does, from the facts alone (plan): first Release, then, only if
// that kept nothing and failed nothing and nothing is Refused, Remove.
type Plan struct {
	Dir string
	// Release are the network mounts to release, the leftover scopes to end and the copy
	// tree to unmount (in the order it can be: copyTree).
	Release []Action
	// Kept is what a running container uses: nothing of the state directory is removed.
	Kept []Kept
	// Refused are mounts below the state directory that are not mountkeeper's.
	Refused []string
	// Remove are the agent's own binds to unmount and its names to remove (sweep).
	Remove []Action
	// Foreign are the entries of the state directory that are not mountkeeper's: they stay.
	Foreign []string
}

// Action is one step of a plan.
type Action struct {
	Kind    ActionKind
	Network netmount.HostMount // ReleaseNetwork
	Copy    copyMount          // UnmountCopy
	Path    string             // UnmountOwn, Remove: the absolute path
	Removal removal            // Remove
}

// ActionKind says what an Action does.
type ActionKind int

const (
	ReleaseNetwork ActionKind = iota // unmount a network mount, remove its files and scope
	EndScopes                        // remove the scopes left without a mount
	UnmountCopy                      // unmount a mount of the copy tree
	UnmountOwn                       // unmount mounts/ or staging/, bound onto themselves
	Remove                           // remove a name of the layout
)

// String is the action for people: one line, as the output shows it.
func (a Action) String() string {
	switch a.Kind {
	case ReleaseNetwork:
		return fmt.Sprintf("release %s at %s and its scope", networkWhat(a.Network), a.Network.Path)
	case EndScopes:
		return "remove the scopes of the network mounts that are left without a mount (one with processes still in it is kept and named)"
	case UnmountCopy:
		if !a.Copy.Layer && !a.Copy.Pod {
			return fmt.Sprintf("unmount the subPath copies' tmpfs at %s (its copies, secrets among them, go with it)", a.Copy.Path)
		}
		return "unmount " + a.Copy.describe()
	case UnmountOwn:
		return fmt.Sprintf("unmount %s (bound onto itself)", a.Path)
	}
	switch a.Removal.Rel {
	case guard.KeyFile:
		return "remove the guard key " + a.Path
	case ".":
		return "remove the state directory " + a.Path
	}
	return "remove " + a.Path
}

func networkWhat(hm netmount.HostMount) string {
	return "network mount " + cmp.Or(hm.Spec, hm.FSType+" (no state file)")
}

// plan decides, from the facts alone, what the cleanup does.
func plan(f Facts) Plan {
	p := Plan{Dir: f.Dir}
	copies := copiesDir(f.Dir)
	known := map[string]bool{f.Dir: true, filepath.Join(f.Dir, "mounts"): true, filepath.Join(f.Dir, "staging"): true}
	for _, hm := range f.Network {
		known[hm.Path] = true
		if h := f.Holders[hm.Device]; len(h) > 0 {
			p.Kept = append(p.Kept, Kept{What: networkWhat(hm), Path: hm.Path, Holders: h})
			continue
		}
		p.Release = append(p.Release, Action{Kind: ReleaseNetwork, Network: hm})
	}
	if f.Scopes && madeMounts(f.Entries) {
		p.Release = append(p.Release, Action{Kind: EndScopes})
	}
	var copyMounts []*mountinfo.Info
	for _, m := range f.Mounts {
		if m.Mountpoint == copies || strings.HasPrefix(m.Mountpoint, copies+"/") {
			copyMounts = append(copyMounts, m)
		} else if !known[m.Mountpoint] {
			p.Refused = append(p.Refused, m.Mountpoint)
		}
	}
	if top := topAt(copyMounts, copies); top != nil {
		order, foreign := copyTree(copyMounts, copies)
		var h []Holder
		for _, d := range copyDevices(copyMounts, copies) {
			h = append(h, f.Holders[d]...)
		}
		switch {
		case len(h) > 0:
			p.Kept = append(p.Kept, Kept{What: "subPath copies (tmpfs)", Path: copies, Holders: h})
		case len(foreign) > 0:
			p.Refused = append(p.Refused, foreign...)
		default:
			for _, c := range order {
				p.Release = append(p.Release, Action{Kind: UnmountCopy, Copy: c})
			}
		}
	} else {
		p.Refused = append(p.Refused, mountpoints(copyMounts)...) // below the copy dir, with no tmpfs on it
	}
	for _, m := range f.Mounts {
		if m.Mountpoint == filepath.Join(f.Dir, "mounts") || m.Mountpoint == filepath.Join(f.Dir, "staging") {
			p.Remove = append(p.Remove, Action{Kind: UnmountOwn, Path: m.Mountpoint})
		}
	}
	remove, foreign := sweep(f.Entries)
	for _, r := range remove {
		p.Remove = append(p.Remove, Action{Kind: Remove, Path: filepath.Join(f.Dir, r.Rel), Removal: r})
	}
	for _, rel := range foreign {
		p.Foreign = append(p.Foreign, filepath.Join(f.Dir, rel))
	}
	return p
}

// blocked is why the Remove steps are not taken: the failures of the Release steps, mounts
// that are not mountkeeper's, or what a container still uses.
func (p Plan) blocked(kept []Kept, failed []error) error {
	if len(p.Refused) > 0 {
		failed = append(failed, fmt.Errorf("%s keeps mounts that are not the agent's (%s): unmount them, then run the cleanup again",
			p.Dir, strings.Join(p.Refused, ", ")))
	}
	if err := errors.Join(failed...); err != nil {
		return fmt.Errorf("node cleanup: %w", err)
	}
	if len(kept) > 0 {
		// The guard key stays with the state directory: the containers named still run on
		// a node whose guard (the runtime wrapper, still in place until unconfigure) checks
		// their pods' next containers against it. It goes with the run that finishes.
		return &InUseError{Kept: kept}
	}
	return nil
}

// print shows the plan, each step as `would: ...`, and returns what apply would return
// before its Remove steps, if anything.
func (p Plan) print(out io.Writer) error {
	for _, a := range p.Release {
		fmt.Fprintf(out, "would: %s\n", a)
	}
	if err := p.blocked(p.Kept, nil); err != nil {
		return err
	}
	p.printForeign(out, "would: ")
	for _, a := range p.Remove {
		fmt.Fprintf(out, "would: %s\n", a)
	}
	return nil
}

func (p Plan) printForeign(out io.Writer, prefix string) {
	for _, path := range p.Foreign {
		fmt.Fprintf(out, "%skeep %s: not mountkeeper's\n", prefix, path)
	}
}

func mountpoints(ms []*mountinfo.Info) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Mountpoint
	}
	return out
}

// madeMounts says whether an agent made network mounts here: a key's lock, state file or
// mount point (netmount's keysOf reads the same names to find their scopes).
func madeMounts(entries []entry) bool {
	for _, e := range entries {
		if (e.Rel == "locks" || e.Rel == "state" || e.Rel == "mounts") && len(e.Children) > 0 {
			return true
		}
	}
	return false
}
