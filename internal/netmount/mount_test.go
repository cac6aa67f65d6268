package netmount

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// TestKernelClientScopeRemoved: once the helper of a kernel client's mount (NFS, CIFS,
// CephFS) has exited, nothing runs in its scope and the scope is removed, or hook mode, which
// never unmounts, would leave it empty for good; a FUSE mount's scope holds its daemon and
// stays.
func TestKernelClientScopeRemoved(t *testing.T) {
	for _, tc := range []struct {
		spec    netspec.Spec
		removed bool
	}{
		{netspec.Spec{Type: "nfs", Source: "server:/export", Options: []string{"vers=3", "nolock"}}, true},
		{netspec.Spec{Type: "nfs4", Source: "server:/"}, true},
		{netspec.Spec{Type: "cifs", Source: "//server/share"}, true},
		{netspec.Spec{Type: "ceph", Source: "mon1:/path"}, true},
		{netspec.Spec{Type: "glusterfs", Source: "server:/volume"}, false},
		{netspec.Spec{Type: "fuse.sshfs", Source: "user@host:dir"}, false},
	} {
		t.Run(tc.spec.Type, func(t *testing.T) {
			f := newFakeSystem()
			c := Config{MountTimeout: time.Second, Log: testLogger(t)}
			target := t.TempDir()
			unit := "mount-" + filepath.Base(target) // as the fake system wants it
			if _, err := attemptMount(context.Background(), f, c, t.TempDir(), tc.spec, unit, target); err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(f.removed, unit); got != tc.removed {
				t.Errorf("scope removed after the mount: %t, want %t (removed %q)", got, tc.removed, f.removed)
			}
		})
	}
}
