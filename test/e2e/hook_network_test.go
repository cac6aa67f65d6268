//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/netmount"
	"github.com/mountkeeper/mountkeeper/netspec"
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
	sshd, err := harness.StartSSHD(w.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sshd.Stop)
	if err := os.WriteFile(filepath.Join(sshd.Export(), "hello"), []byte("hello over sshfs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := netspec.Spec{Type: "fuse.sshfs", Source: "root@127.0.0.1:" + sshd.Export(), Options: []string{
		fmt.Sprintf("port=%d", sshd.Port()), "IdentityFile=" + sshd.IdentityFile(), "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"}}
	t.Cleanup(func() {
		if err := harness.RemoveMountScope(spec.Key()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	stateDir := filepath.Join(w.dir, "state")
	cfg := fmt.Sprintf("stateDir: %s\nruntimeClasses:\n  mk-hook-sshfs:\n    mounts:\n      - {type: %s, source: %q, destination: /data, propagation: HostToContainer, options: [%s]}\n",
		stateDir, spec.Type, spec.Source, strings.Join(spec.Options, ", "))
	if err := os.WriteFile(w.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	hostPath := netmount.HostPath(stateDir, spec)

	for _, id := range []string{"sshfs-1", "sshfs-2"} {
		b := w.bundle(id, func(s *oci.Spec) { s.Hooks = w.runcExampleHooks("mk-hook-sshfs") })
		if err := w.run(id, b); err != nil {
			t.Fatalf("runc run %s with the hook: %v", id, err)
		}
		out, _, code, err := w.exec(id)(w.ctx, "cat", "/data/hello")
		if err != nil || code != 0 || out != "hello over sshfs\n" {
			t.Errorf("%s reads %q (exit %d, %v)", id, out, code, err)
		}
	}
	if got := fuseMountsAt(t, hostPath); got != 1 {
		t.Errorf("%d host mounts at %s, want 1 shared by both containers", got, hostPath)
	}
	if cg := harness.ProcessCgroup("sshfs", sshd.Export()); cg != "/mountkeeper.slice/mount-"+spec.Key() {
		t.Errorf("the sshfs daemon runs in cgroup %q, want its own scope /mountkeeper.slice/mount-%s", cg, spec.Key())
	}
}
