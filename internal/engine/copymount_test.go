package engine_test

import (
	"slices"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
)

// TestCopyMountIsReadOnly: a container's mount of a private copy is read-only whatever the
// options of the mount it replaces (kubelet's are "ro" for every atomic-writer volume): the
// copy is on the node's shared copy tmpfs, where a write would be charged to nobody. The other
// options stay, and a live copy is bound rslave.
func TestCopyMountIsReadOnly(t *testing.T) {
	for _, tc := range []struct {
		opts []string
		live bool
		want []string
	}{
		{[]string{"rbind", "rprivate", "ro"}, false, []string{"rbind", "rprivate", "ro"}},
		{[]string{"rbind", "rprivate", "rw"}, false, []string{"rbind", "rprivate", "ro"}},
		{[]string{"rbind", "rprivate"}, false, []string{"rbind", "rprivate", "ro"}},
		{[]string{"rbind", "rprivate", "rw", "nosuid"}, true, []string{"rbind", "nosuid", "ro", "rslave"}},
	} {
		got := engine.CopyMountOptions(tc.opts, copies.Copy{Path: "/state/subpath/uid/ctr/cfg/0", Live: tc.live}, false)
		if !slices.Equal(got, tc.want) {
			t.Errorf("copy mount of %v (live %t): options %v, want %v", tc.opts, tc.live, got, tc.want)
		}
	}
}
