//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestPodman runs the shipped hooks.d files under real podman (Debian's 4.3.1) with runc
// 1.5.2: configs/examples/hooks.d (prestart) and configs/examples/podman-hooks.d (precreate),
// each rewritten only to point at the test's binary and config, in a hooks directory of its
// own. A container annotated with the class gets the three propagations (the three-way check
// with real probe mounts); an unannotated one gets nothing. podman keeps its images and
// containers in a private --root/--runroot (vfs storage), removed afterwards.
func TestPodman(t *testing.T) {
	testenv.Require(t, "root")
	testenv.Require(t, "podman")
	testenv.Require(t, "conmon")
	testenv.Require(t, harness.RuncBinary())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := harness.WorkDir(t, "mk-podman-")
	bin, err := harness.BuildMountkeeper(dir)
	if err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(dir, "src")
	if err := harness.MountTmpfs(host, "shared"); err != nil {
		t.Fatal(err)
	}
	cgroupParent := "/" + filepath.Base(dir)
	p := &podman{t: t, ctx: ctx, global: []string{
		"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "runroot"),
		"--storage-driver", "vfs", "--runtime", harness.RuncBinary(),
		"--cgroup-manager", "cgroupfs", "--events-backend", "file", "--tmpdir", filepath.Join(dir, "tmp"),
	}}
	t.Cleanup(func() {
		// The test's ctx is cancelled by now: cleanup gets a context of its own.
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		p.ctx = cctx
		if out, err := p.run("rm", "--force", "--all", "--time", "0"); err != nil {
			t.Errorf("cleanup: podman rm: %v\n%s", err, out)
		}
		if out, err := p.run("system", "reset", "--force"); err != nil {
			t.Errorf("cleanup: podman system reset: %v\n%s", err, out)
		}
		removeCgroupParent(t, cgroupParent)
	})
	archive := filepath.Join(dir, "busybox.tar")
	if err := harness.WriteBusyboxArchive(archive); err != nil {
		t.Fatal(err)
	}
	if out, err := p.run("load", "-i", archive); err != nil {
		t.Fatalf("podman load: %v\n%s", err, out)
	}

	const class = "runc-mountkeeper" // the examples' class; their `when` matches its annotation
	for _, ex := range []struct{ stage, file string }{
		{"prestart", "hooks.d/mountkeeper-runc-mountkeeper.json"},
		{"precreate", "podman-hooks.d/mountkeeper-runc-mountkeeper-precreate.json"},
	} {
		t.Run(ex.stage, func(t *testing.T) {
			base := filepath.Join(host, ex.stage)
			for _, d := range []string{"private", "slave", "shared"} {
				if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			config := filepath.Join(dir, ex.stage+".yaml")
			if err := os.WriteFile(config, []byte("runtimeClasses:\n"+threeWayClass(class, base)), 0o644); err != nil {
				t.Fatal(err)
			}
			hooksDir := filepath.Join(dir, "hooks-"+ex.stage)
			writeHooksD(t, ex.file, hooksDir, bin, config, class)

			run := func(name string, annotate bool) error {
				args := []string{"run", "--detach", "--name", name, "--hooks-dir", hooksDir,
					"--network", "none", "--cgroup-parent", cgroupParent,
					"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
					"--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined", "--security-opt", "label=disable"}
				if annotate {
					args = append(args, "--annotation", "mountkeeper.io/runtime-class="+class)
				}
				args = append(args, harness.BusyboxImage, "sleep", "3600")
				out, err := p.run(args...)
				if err != nil {
					return fmt.Errorf("podman run %s: %v\n%s", name, err, out)
				}
				return nil
			}
			if err := run(ex.stage+"-class", true); err != nil {
				t.Fatal(err)
			}
			checkThreeWay(t, ctx, p.execer(ex.stage+"-class"), base)
			if err := run(ex.stage+"-plain", false); err != nil {
				t.Fatal(err)
			}
			out, _, _, err := p.execer(ex.stage+"-plain")(ctx, "cat", "/proc/self/mountinfo")
			if err != nil || strings.Contains(out, "/vol/") {
				t.Errorf("unannotated container: %v; mountinfo:\n%s", err, out)
			}
		})
	}
}
