//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestHookSSHFS runs an sshfs class in hook mode under plain runc: the createRuntime hook
// mounts the export on the host in a cgroup scope of its own (the FUSE daemon must outlive the
// hook process), binds it into the container, and a second container of the class reuses the
// same host mount.
func TestHookSSHFS(t *testing.T) {
	testenv.Require(t, "fuse")
	w := newHookWorld(t)
	spec, hostPath := w.sshfsClass("mk-hook-sshfs")

	for _, id := range []string{"sshfs-1", "sshfs-2"} {
		b := w.bundle(id, func(s *oci.Spec) { s.Hooks = w.runcExampleHooks("mk-hook-sshfs") })
		if err := w.run(id, b); err != nil {
			t.Fatalf("runc run %s with the hook: %v", id, err)
		}
		out, _, code, err := w.exec(id)(w.ctx, "cat", "/data/hello")
		if err != nil || code != 0 || out != helloSSHFS {
			t.Errorf("%s reads %q (exit %d, %v)", id, out, code, err)
		}
	}
	if got := fuseMountsAt(t, hostPath); got != 1 {
		t.Errorf("%d host mounts at %s, want 1 shared by both containers", got, hostPath)
	}
	if cg := harness.ProcessCgroup("sshfs", strings.TrimPrefix(spec.Source, "root@127.0.0.1:")); cg != "/mountkeeper.slice/mount-"+spec.Key() {
		t.Errorf("the sshfs daemon runs in cgroup %q, want its own scope /mountkeeper.slice/mount-%s", cg, spec.Key())
	}
}

// TestHookSSHFSConcurrentStarts starts 20 hook-mode containers of an sshfs class at once,
// while an NRI plugin holds the state directory's lock, as on a node that runs both modes:
// each hook takes only the mount's own lock while it mounts, so one mounts and the others find
// its mount; all get the export, on one host mount. A hook that built a whole Manager waited
// 10 s for the state directory's lock and failed.
func TestHookSSHFSConcurrentStarts(t *testing.T) {
	testenv.Require(t, "fuse")
	w := newHookWorld(t)
	_, hostPath := w.sshfsClass("mk-hook-sshfs")
	// An NRI plugin on the same state directory holds its lock as long as it runs: the hooks
	// must not wait for it.
	stateDir := filepath.Dir(filepath.Dir(hostPath))
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(stateDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	const n = 20
	ids := make([]string, n)
	bundles := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("sshfs-many-%02d", i)
		bundles[i] = w.bundle(ids[i], func(s *oci.Spec) { s.Hooks = w.runcExampleHooks("mk-hook-sshfs") })
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.run(ids[i], bundles[i])
		}()
	}
	wg.Wait()
	t.Logf("%d containers started at once in %s", n, time.Since(start).Round(time.Millisecond))
	for i, id := range ids {
		if errs[i] != nil {
			t.Errorf("runc run %s with the hook: %v", id, errs[i])
			continue
		}
		out, _, code, err := w.exec(id)(w.ctx, "cat", "/data/hello")
		if err != nil || code != 0 || out != helloSSHFS {
			t.Errorf("%s reads %q (exit %d, %v)", id, out, code, err)
		}
	}
	if got := fuseMountsAt(t, hostPath); got != 1 {
		t.Errorf("%d host mounts at %s, want 1 shared by all %d containers", got, hostPath, n)
	}
}
