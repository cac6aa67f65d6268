package hook

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/test/benchratio"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// BenchmarkRuncRunHook measures what the hook adds to starting a container: `runc run` of a
// busybox container whose process is `true`, with the hook in createRuntime adding a class of
// three mounts (rprivate, rslave, rshared, with the host checks), against the same container
// without the hook. The ratio is candidate/baseline, measured interleaved in one run; the
// target is 1.15 for mountkeeper-hook. For scale, the same with the whole mountkeeper binary
// as the hook, and with a Go program that does nothing (test/tools/emptyhook): the floor of
// any hook written in Go.
//
// It needs root and the harness's runc (test/tools/install.sh); it skips without them (fails
// under MOUNTKEEPER_REQUIRE_ALL=1, see testenv).
func BenchmarkRuncRunHook(b *testing.B) {
	testenv.Require(b, "root", harness.RuncBinary())
	ctx := context.Background()
	dir := harness.WorkDir(b, "mk-bench-hook-")
	hookBin, err := harness.BuildHook(dir)
	if err != nil {
		b.Fatal(err)
	}
	fullBin, err := harness.BuildMountkeeper(dir)
	if err != nil {
		b.Fatal(err)
	}
	// harness builds only ./cmd/<name>; emptyhook is built here, without cgo as the others.
	emptyBin := filepath.Join(dir, "emptyhook")
	build := exec.Command("go", "build", "-o", emptyBin, "github.com/mountkeeper/mountkeeper/test/tools/emptyhook")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build emptyhook: %v: %s", err, out)
	}
	r, err := harness.NewRunc(filepath.Join(dir, "runc"))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()

	src := filepath.Join(dir, "src")
	if err := harness.MountTmpfs(src, "shared"); err != nil {
		b.Fatal(err)
	}
	for _, d := range []string{"private", "slave", "shared"} {
		os.Mkdir(filepath.Join(src, d), 0o755)
	}
	config := filepath.Join(dir, "config.yaml")
	os.WriteFile(config, []byte(fmt.Sprintf(`runtimeClasses:
  bench:
    allowBidirectionalForUnprivileged: true
    mounts:
      - {source: %[1]s/private, destination: /vol/private, propagation: None}
      - {source: %[1]s/slave, destination: /vol/slave, propagation: HostToContainer, readOnly: true}
      - {source: %[1]s/shared, destination: /vol/shared, propagation: Bidirectional}
`, src)), 0o644)

	timeout := 10
	bundle := func(name string, hooks *oci.Hooks) string {
		b.Helper()
		bd := filepath.Join(dir, name)
		if err := harness.BusyboxRootfs(filepath.Join(bd, "rootfs")); err != nil {
			b.Fatal(err)
		}
		spec, err := r.Spec(ctx)
		if err != nil {
			b.Fatal(err)
		}
		spec.Process.Terminal = false
		spec.Process.Args = []string{"true"}
		spec.Hooks = hooks
		if err := harness.WriteSpec(bd, spec); err != nil {
			b.Fatal(err)
		}
		return bd
	}
	plain := bundle("plain", nil)
	hooked := func(name, bin string) string {
		return bundle("bundle-"+name, &oci.Hooks{CreateRuntime: []oci.Hook{{
			Path: bin, Args: []string{"mountkeeper", "hook", "createRuntime", "--config", config, "--runtime-class", "bench"}, Timeout: &timeout,
		}}})
	}

	n := 0
	// run runs bundle's container once; a failure fails sb, the sub-benchmark that runs it.
	run := func(sb *testing.B, bundle string) func() {
		return func() {
			n++
			if err := r.RunForeground(ctx, fmt.Sprintf("mk-bench-%d", n), bundle); err != nil {
				sb.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name, bin string
		target    float64 // 0: for scale
	}{
		{"mountkeeper-hook", hookBin, 1.15},
		{"mountkeeper", fullBin, 0},
		{"empty-go-program", emptyBin, 0},
	} {
		bd := hooked(c.name, c.bin)
		b.Run(c.name, func(b *testing.B) {
			// One run of each first: the first container pays for cold caches, and the
			// hooked one must work before it is timed.
			run(b, plain)()
			run(b, bd)()
			if c.target == 0 {
				if r := benchratio.Compare(b, run(b, plain), run(b, bd)); b.N > 1 {
					b.Logf("%s: ratio %.3f (for scale)", b.Name(), r)
				}
				return
			}
			benchratio.CompareTarget(b, c.target, run(b, plain), run(b, bd))
		})
	}
}
