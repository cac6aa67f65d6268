//go:build e2e && guestnfs

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// TestGuestNFSHook runs an NFSv3 class in hook mode under plain runc in test/vm's NFS guest:
// the createRuntime hook of the first container mounts the export on the host, the second
// container's finds that mount; both read it. The node's rpc.statd, started for the first v3
// mount, runs in a scope of its own, and no mount scope is left behind: mount.nfs has exited
// and a kernel client has no daemon to keep (hook mode never unmounts, so the scope must go
// right after the mount).
func TestGuestNFSHook(t *testing.T) {
	scopes := inGuestNFS(t)
	testsupport.InstallNFSClient(t, os.Getenv(guestNFSRootEnv)) // if TestGuestNFSDeadServer did not
	w := newHookWorld(t)
	const class = "mk-hook-nfs3"
	spec := netspec.Spec{Type: "nfs", Source: "127.0.0.1:/export", Options: []string{"vers=3", "hard"}}
	stateDir := filepath.Join(w.dir, "state")
	hostPath := netmount.HostPath(stateDir, spec)
	cfg := fmt.Sprintf("stateDir: %s\nruntimeClasses:\n  %s:\n    mounts:\n      - {type: nfs, source: %q, destination: /data, propagation: HostToContainer, options: [vers=3, hard]}\n",
		stateDir, class, spec.Source)
	if err := os.WriteFile(w.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Hook mode leaves its mounts in place; the test takes its own away once the containers
	// are gone (registered before them, so it runs after their deletion).
	t.Cleanup(func() {
		if err := unix.Unmount(hostPath, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			t.Errorf("cleanup: unmount %s: %v", hostPath, err)
		}
		if err := harness.RemoveMountScope(spec.Key()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	for _, id := range []string{"nfs-hook-1", "nfs-hook-2"} {
		b := w.bundle(id, func(s *oci.Spec) { s.Hooks = w.runcExampleHooks(class) })
		start := time.Now()
		if err := w.run(id, b); err != nil {
			t.Fatalf("runc run %s with the hook: %v", id, err)
		}
		t.Logf("%s created and started with its hook in %s", id, time.Since(start).Round(time.Millisecond))
		out, _, code, err := w.exec(id)(w.ctx, "cat", "/data/hello")
		if err != nil || code != 0 || out != guestNFSContent {
			t.Errorf("%s reads %q at /data/hello (exit %d, %v), want %q", id, out, code, err, guestNFSContent)
		}
	}
	oneNFSMount(t, hostPath)
	if left := scopesBesideStatd(t, scopes); len(left) > 0 {
		t.Errorf("scopes left after the hooks' mount: %v; a kernel mount's scope goes once mount.nfs has exited", left)
	}
	pid := testsupport.StatdPid()
	if pid == 0 {
		t.Fatal("no rpc.statd runs with an NFSv3 mount")
	}
	self, err := testsupport.CgroupV2(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	checkStatdCgroup(t, pid, scopes, filepath.Join(filepath.Dir(scopes), self))
}
