package nodecleanup

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/moby/sys/mountinfo"
)

// The subPath copies' tmpfs (<stateDir>/subpath) is not always one mount: a live subPath
// copy's path P is a bind of itself (its base) with the versions P.v<N> attached on top of it
// or beneath the layer on top (internal/subpath, layers.go). The agent takes them down when a
// container goes; an agent removed before the pods leaves them, and the tmpfs cannot be
// unmounted while mounts sit on it (EBUSY). They are all binds of the tmpfs (its device), so a
// container that still holds one is found as a holder of the tmpfs, and then none of it is
// touched.

// copyMount is one mount of the copy tree, in the order it can be unmounted.
type copyMount struct {
	ID    int
	Path  string
	Layer bool // a live copy's base or layer, not the tmpfs itself
}

// copyTree orders the mounts at or below copies (from mountinfo) for unmounting: each after
// every mount that sits on it (post-order of the mount tree), so that each is the one on top
// at its path when its turn comes. Of the mounts on one parent, one whose path is a prefix of
// another's was attached later and covers it: it goes first. A mount of another device
// (not a bind of the tmpfs) is not mountkeeper's: it is returned in foreign, and nothing is to
// be unmounted then.
func copyTree(infos []*mountinfo.Info, copies string) (order []copyMount, foreign []string) {
	byID := make(map[int]*mountinfo.Info, len(infos))
	for _, m := range infos {
		byID[m.ID] = m
	}
	children := make(map[int][]*mountinfo.Info)
	var roots []*mountinfo.Info
	for _, m := range infos {
		if _, ok := byID[m.Parent]; ok && m.Parent != m.ID {
			children[m.Parent] = append(children[m.Parent], m)
		} else {
			roots = append(roots, m)
		}
	}
	covering := func(a, b *mountinfo.Info) int {
		return cmp.Or(cmp.Compare(len(a.Mountpoint), len(b.Mountpoint)), cmp.Compare(a.Mountpoint, b.Mountpoint), cmp.Compare(b.ID, a.ID))
	}
	tmpfs := topAt(infos, copies)
	var walk func(m *mountinfo.Info)
	walk = func(m *mountinfo.Info) {
		kids := children[m.ID]
		slices.SortFunc(kids, covering)
		for _, k := range kids {
			walk(k)
		}
		if tmpfs == nil || m.Major != tmpfs.Major || m.Minor != tmpfs.Minor {
			foreign = append(foreign, fmt.Sprintf("%s (%s %s)", m.Mountpoint, m.FSType, m.Source))
			return
		}
		order = append(order, copyMount{ID: m.ID, Path: m.Mountpoint, Layer: m.ID != tmpfs.ID})
	}
	slices.SortFunc(roots, covering)
	for _, r := range roots {
		walk(r)
	}
	if len(foreign) > 0 {
		return nil, foreign
	}
	return order, nil
}

// topAt is the mount on top at path: the one of those at path that no other there sits on.
func topAt(infos []*mountinfo.Info, path string) *mountinfo.Info {
	var at []*mountinfo.Info
	for _, m := range infos {
		if m.Mountpoint == path {
			at = append(at, m)
		}
	}
	for _, m := range at {
		if !slices.ContainsFunc(at, func(o *mountinfo.Info) bool { return o.Parent == m.ID }) {
			return m
		}
	}
	return nil
}

// describe says what a mount of the copy tree is, for the output and errors.
func (c copyMount) describe() string {
	if c.Layer {
		return fmt.Sprintf("the live subPath copy's mount %d (its base or a layer) at %s", c.ID, c.Path)
	}
	return "the subPath copies' tmpfs at " + c.Path
}
