package nodecleanup

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/moby/sys/mountinfo"

	subpathcopies "github.com/mountkeeper/mountkeeper/internal/subpath/copies"
)

// The subPath copies' tmpfs (<stateDir>/subpath) is not always one mount: a live subPath
// copy's path P is a bind of itself (its base) with the versions P.v<N> attached on top of it
// or beneath the layer on top (internal/subpath, layers.go). The agent takes them down when a
// container goes; an agent removed before the pods leaves them, and the tmpfs cannot be
// unmounted while mounts sit on it (EBUSY). Each pod's copies are on a tmpfs of their own
// mounted on it at <stateDir>/subpath/<pod UID> (source copies.PodTmpfsSource), under its
// live copies' mounts. The live copies' mounts are binds of their pod's tmpfs, so a container
// that still holds one is found as a holder of one of these devices, and then none of it is
// touched.

// copyMount is one mount of the copy tree, in the order it can be unmounted.
type copyMount struct {
	ID    int
	Path  string
	Layer bool // a live copy's base or layer, not the tmpfs itself
	Pod   bool // a pod's tmpfs
}

// copyTree orders the mounts at or below copies (from mountinfo) for unmounting: each after
// every mount that sits on it (post-order of the mount tree), so that each is the one on top
// at its path when its turn comes. Of the mounts on one parent, one whose path is a prefix of
// another's was attached later and covers it: it goes first (so a pod's tmpfs goes after the
// live copies on it, and the node's tmpfs last). A mount of another device (neither a bind of
// the tmpfs nor a pod's tmpfs or a bind of it) is not mountkeeper's: it is returned in
// foreign, and nothing is to be unmounted then.
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
	ours := map[string]bool{}
	pods := podTmpfs(infos, copies, tmpfs)
	if tmpfs != nil {
		ours[device(tmpfs)] = true
	}
	for _, p := range pods {
		ours[device(p)] = true
	}
	var walk func(m *mountinfo.Info)
	walk = func(m *mountinfo.Info) {
		kids := children[m.ID]
		slices.SortFunc(kids, covering)
		for _, k := range kids {
			walk(k)
		}
		if !ours[device(m)] {
			foreign = append(foreign, fmt.Sprintf("%s (%s %s)", m.Mountpoint, m.FSType, m.Source))
			return
		}
		pod := slices.Contains(pods, m)
		order = append(order, copyMount{ID: m.ID, Path: m.Mountpoint, Layer: m.ID != tmpfs.ID && !pod, Pod: pod})
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

// podTmpfs are the pods' tmpfs mounts on the copies' tmpfs: mounted on it, one level below
// copies, a tmpfs of the name the agent gives them.
func podTmpfs(infos []*mountinfo.Info, copies string, tmpfs *mountinfo.Info) []*mountinfo.Info {
	var pods []*mountinfo.Info
	for _, m := range infos {
		if tmpfs != nil && m.Parent == tmpfs.ID && filepath.Dir(m.Mountpoint) == copies && m.FSType == "tmpfs" && m.Source == subpathcopies.PodTmpfsSource {
			pods = append(pods, m)
		}
	}
	return pods
}

// copyDevices are the devices of the copy tree (major:minor): the copies' tmpfs and the
// pods' tmpfs mounts, whose holders keep it.
func copyDevices(infos []*mountinfo.Info, copies string) []string {
	tmpfs := topAt(infos, copies)
	if tmpfs == nil {
		return nil
	}
	devices := []string{device(tmpfs)}
	for _, p := range podTmpfs(infos, copies, tmpfs) {
		devices = append(devices, device(p))
	}
	return devices
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
	if c.Pod {
		return "the pod's subPath copies' tmpfs at " + c.Path
	}
	return "the subPath copies' tmpfs at " + c.Path
}
