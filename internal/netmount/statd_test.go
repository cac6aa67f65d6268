package netmount

import (
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

func TestNeedsStatd(t *testing.T) {
	for _, c := range []struct {
		typ  string
		opts []string
		want bool
	}{
		{"nfs", []string{"vers=3"}, true},
		{"nfs", []string{"nfsvers=3", "hard"}, true},
		{"nfs", []string{"v3"}, true},
		{"nfs", nil, true}, // mount.nfs may fall back to v3
		{"nfs", []string{"vers=3", "nolock"}, false},
		{"nfs", []string{"vers=3", "local_lock=all"}, false},
		{"nfs", []string{"vers=3", "local_lock=flock"}, true},
		{"nfs", []string{"vers=4.2"}, false},
		{"nfs", []string{"nfsvers=4"}, false},
		{"nfs4", nil, false},
		{"cifs", nil, false},
	} {
		if got := needsStatd(netspec.Spec{Type: c.typ, Source: "srv:/x", Options: c.opts}); got != c.want {
			t.Errorf("needsStatd(%s %v) = %v, want %v", c.typ, c.opts, got, c.want)
		}
	}
}
