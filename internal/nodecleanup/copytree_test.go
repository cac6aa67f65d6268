package nodecleanup

import (
	"slices"
	"testing"

	"github.com/moby/sys/mountinfo"

	subpathcopies "github.com/mountkeeper/mountkeeper/internal/subpath/copies"
)

// TestCopyTree: the order in which the copy tree can be unmounted, each mount when it is the
// one on top at its path, from mountinfo as the kernel lists it (not in that order).
func TestCopyTree(t *testing.T) {
	const c = "/s/subpath"
	m := func(id, parent int, point string, minor int) *mountinfo.Info {
		return &mountinfo.Info{ID: id, Parent: parent, Mountpoint: point, Major: 0, Minor: minor, FSType: "tmpfs", Source: "x"}
	}
	pod := func(id, parent int, point string, minor int) *mountinfo.Info {
		i := m(id, parent, point, minor)
		i.Source = subpathcopies.PodTmpfsSource
		return i
	}
	tests := []struct {
		name        string
		infos       []*mountinfo.Info
		wantIDs     []int
		wantForeign int
	}{
		{"the tmpfs alone", []*mountinfo.Info{m(10, 1, c, 40)}, []int{10}, 0},
		{"a base with a layer attached beneath the one on top (base 11, then 13 beneath 12): top first, listed out of order",
			[]*mountinfo.Info{m(10, 1, c, 40), m(12, 13, c+"/p/0", 40), m(11, 10, c+"/p/0", 40), m(13, 11, c+"/p/0", 40)},
			[]int{12, 13, 11, 10}, 0},
		{"two copies: each stack before the tmpfs",
			[]*mountinfo.Info{m(10, 1, c, 40), m(11, 10, c+"/p/0", 40), m(12, 11, c+"/p/0", 40), m(21, 10, c+"/p/1", 40)},
			[]int{12, 11, 21, 10}, 0},
		{"of two mounts on one parent, the covering one (a prefix of the other's path) first",
			[]*mountinfo.Info{m(10, 1, c, 40), m(11, 10, c+"/a/b", 40), m(12, 10, c+"/a", 40)},
			[]int{12, 11, 10}, 0},
		{"a mount of another filesystem below the copies: not mountkeeper's, nothing unmounted",
			[]*mountinfo.Info{m(10, 1, c, 40), m(11, 10, c+"/p/0", 40), m(12, 11, c+"/p/0/x", 77)},
			nil, 1},
		{"a pod's tmpfs with a live copy on it: the copy, the pod's tmpfs, then the copy tmpfs",
			[]*mountinfo.Info{m(10, 1, c, 40), pod(20, 10, c+"/p", 41), m(21, 20, c+"/p/c/v/0", 41), m(22, 21, c+"/p/c/v/0", 41), m(30, 10, c+"/q/c/v/0", 40)},
			[]int{22, 21, 20, 30, 10}, 0},
		{"a tmpfs of another name at a pod's place: not mountkeeper's",
			[]*mountinfo.Info{m(10, 1, c, 40), m(20, 10, c+"/p", 41)}, nil, 1},
		{"nothing mounted", nil, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			order, foreign := copyTree(tt.infos, c)
			var ids []int
			for _, o := range order {
				ids = append(ids, o.ID)
				if o.Layer != (o.ID != 10 && o.ID != 20) || o.Pod != (o.ID == 20) {
					t.Errorf("mount %d: Layer %v", o.ID, o.Layer)
				}
			}
			if !slices.Equal(ids, tt.wantIDs) || len(foreign) != tt.wantForeign {
				t.Errorf("copyTree = %v, foreign %v; want %v and %d foreign", ids, foreign, tt.wantIDs, tt.wantForeign)
			}
		})
	}
}
