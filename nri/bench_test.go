package nri

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/test/benchratio"

	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// noopPlugin is the baseline: a plugin that subscribes to CreateContainer and changes nothing,
// so the ratio isolates what mountkeeper adds to a round trip.
type noopPlugin struct{}

func (noopPlugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

// mountSharedSources makes a tmpfs, marks it shared, and creates the three class sources in it,
// so the real host checks (stat, mount ID, mountinfo) run as on a node. The caller is in a
// private mount namespace already.
func mountSharedSources(b testing.TB) string {
	dir := shortDir(b)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		b.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	b.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if out, err := exec.Command("mount", "--make-rshared", dir).CombinedOutput(); err != nil {
		b.Fatalf("make %s shared: %v: %s", dir, err, out)
	}
	for _, d := range []string{"private", "slave", "shared"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// benchConfig is a class "bench" of three class mounts, one per propagation, on real shared
// sources (mountSharedSources), with its state (the guard key) in the benchmark's temp dir.
func benchConfig(b *testing.B) *configs.Config {
	privatens.Require(b)
	return threeMountConfig(b, mountSharedSources(b))
}

// threeMountConfig is benchConfig's config on the sources in src (mountSharedSources).
func threeMountConfig(t testing.TB, src string) *configs.Config {
	return mustConfig(t, `runtimeClasses:
  bench:
    allowBidirectionalForUnprivileged: true
    mounts:
      - {source: `+src+`/private, destination: /private, propagation: rprivate}
      - {source: `+src+`/slave, destination: /slave, propagation: rslave}
      - {source: `+src+`/shared, destination: /shared, propagation: rshared}
`)
}

// staticPlugin adds three fixed mounts without looking at anything: the least any plugin that
// adds three mounts costs (a bigger response to encode, decode and apply). It shows how much
// of mountkeeper's ratio is NRI's and how much is its own checks.
type staticPlugin struct{}

func (staticPlugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	a := &api.ContainerAdjustment{}
	for _, d := range []string{"/private", "/slave", "/shared"} {
		a.AddMount(&api.Mount{Source: "/tmp/mk-nri-0123456789" + d, Destination: d, Type: "bind", Options: []string{"rbind", "rprivate"}})
	}
	return a, nil, nil
}

// BenchmarkCreateContainer is the CreateContainer round trip through NRI's runtime side with
// mountkeeper adding three class mounts (real host checks: stat, statx, statmount), against a
// no-op plugin; and, for scale, a plugin that adds three fixed mounts against the same no-op.
func BenchmarkCreateContainer(b *testing.B) {
	plugin := NewPlugin(benchConfig(b), true, NewHostChecker(), quietLogger())
	mk := startRuntime(b, filepath.Join(shortDir(b), "nri.sock"))
	defer mk.Stop()
	runPlugin(b, plugin, mk.socket)
	mk.waitSynced(b)

	noop := startRuntime(b, filepath.Join(shortDir(b), "nri.sock"))
	defer noop.Stop()
	runStub(b, noopPlugin{}, noop.socket)
	noop.waitSynced(b)

	static := startRuntime(b, filepath.Join(shortDir(b), "nri.sock"))
	defer static.Stop()
	runStub(b, staticPlugin{}, static.socket)
	static.waitSynced(b)

	ctx := context.Background()
	create := func(rt *testRuntime, wantMounts int) func() {
		return func() {
			// A fresh request each time: the runtime side applies adjustments to the request.
			rsp, err := rt.CreateContainer(ctx, createRequest("bench"))
			if err != nil || len(rsp.GetAdjust().GetMounts()) != wantMounts {
				b.Fatalf("CreateContainer: %d mounts, err %v", len(rsp.GetAdjust().GetMounts()), err)
			}
		}
	}
	// replay answers with exactly what mountkeeper answered (the same 3 mounts, options and
	// guard annotation) and checks nothing: mountkeeper against it is mountkeeper's own work.
	rsp, err := mk.CreateContainer(ctx, createRequest("bench"))
	if err != nil {
		b.Fatal(err)
	}
	replay := startRuntime(b, filepath.Join(shortDir(b), "nri.sock"))
	defer replay.Stop()
	runStub(b, replayPlugin{rsp.GetAdjust()}, replay.socket)
	replay.waitSynced(b)

	b.Run("mountkeeper-vs-noop", func(b *testing.B) { benchratio.Compare(b, create(noop, 0), create(mk, 3)) })
	b.Run("static-3-mounts-vs-noop", func(b *testing.B) { benchratio.Compare(b, create(noop, 0), create(static, 3)) })
	b.Run("mountkeeper-vs-same-answer", func(b *testing.B) {
		benchratio.CompareTarget(b, 1.05, create(replay, 3), create(mk, 3))
	})
}

// replayPlugin answers every CreateContainer with a copy of one adjustment.
type replayPlugin struct{ adj *api.ContainerAdjustment }

func (r replayPlugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	a := &api.ContainerAdjustment{Annotations: r.adj.Annotations}
	for _, m := range r.adj.Mounts {
		a.AddMount(&api.Mount{Destination: m.Destination, Type: m.Type, Source: m.Source, Options: m.Options})
	}
	return a, nil, nil
}

// runStub runs a bare NRI stub for p until the benchmark ends.
func runStub(b *testing.B, p any, socket string) {
	s, err := stub.New(p, stub.WithSocketPath(socket), stub.WithPluginName("noop"), stub.WithPluginIdx("10"),
		stub.WithLogger(nriLogger{quietLogger()}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
}
