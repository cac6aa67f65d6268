package subpath

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/test/benchratio"

	"github.com/mountkeeper/mountkeeper/internal/subpath/subpathtest"

	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// benchMounts is the number of mounts on the benchmark's "node".
const benchMounts = 10_000

// BenchmarkStaleCheck compares, on a node with 10,000 mounts, the staleness check of one
// subPath mount (Repairer.Stale: one statx) with what kubelet does per container: parse
// /proc/self/mountinfo once. It mounts, so it runs only in a private mount namespace of its
// own: `make bench` runs it under `unshare -m --propagation private` with
// MOUNTKEEPER_PRIVATE_MOUNT_NS=1.
//
// Metrics: baseline-ns/op and candidate-ns/op as benchratio.Compare measured them, "ratio"
// (candidate/baseline; the speedup is its inverse), "x-faster" (the speedup, from the times
// each closure measured of its own call, without Compare's timing around it), and
// "alone-ns/op": Stale in a loop of its own, with caches not cooled by a mountinfo parse just
// before each call, as in the plugin.
func BenchmarkStaleCheck(b *testing.B) {
	privatens.Require(b)

	// The node's mounts: one tmpfs, and 10,000 binds of a directory of it onto directories of
	// it, so that one lazy unmount of the tmpfs removes them all.
	base, err := filepath.EvalSymlinks(b.TempDir())
	subpathtest.Must(b, err)
	node := filepath.Join(base, "node")
	subpathtest.Must(b, os.Mkdir(node, 0o755))
	subpathtest.Must(b, unix.Mount("tmpfs", node, "tmpfs", 0, "size=64m"))
	b.Cleanup(func() {
		if err := unix.Unmount(node, unix.MNT_DETACH); err != nil {
			b.Errorf("unmount %s: %v", node, err)
		}
	})
	src := filepath.Join(node, "src")
	subpathtest.Must(b, os.Mkdir(src, 0o755))
	start := time.Now()
	for i := range benchMounts {
		p := filepath.Join(node, strconv.Itoa(i))
		subpathtest.Must(b, os.Mkdir(p, 0o755))
		subpathtest.Must(b, unix.Mount(src, p, "", unix.MS_BIND, ""))
	}
	made := time.Since(start)

	// One subPath mount of a configMap key, made stale by an update, as the plugin meets it.
	k := subpathtest.NewKubelet(b)
	vol := k.Volume(subpathtest.ConfigMap, "cfg", false)
	k.WriteAtomic(vol, map[string]subpathtest.Entry{"app.conf": subpathtest.File("v1")})
	tg := subpathtest.Bind(k, ParseTarget, vol, "cfg", "app", 0, "app.conf")
	k.WriteAtomic(vol, map[string]subpathtest.Entry{"app.conf": subpathtest.File("v2")})
	r := NewRepairer(k.Root)

	infos, err := mountinfo.GetMounts(nil)
	subpathtest.Must(b, err)
	if len(infos) < benchMounts {
		b.Fatalf("mountinfo lists %d mounts, want at least %d", len(infos), benchMounts)
	}
	b.Logf("%d mounts in this namespace (%d made in %s)", len(infos), benchMounts, made.Round(time.Millisecond))

	var baseSum, candSum time.Duration
	baseline := func() {
		t0 := time.Now()
		infos, err := mountinfo.GetMounts(nil)
		baseSum += time.Since(t0)
		if err != nil || len(infos) < benchMounts {
			b.Fatalf("GetMounts: %d mounts, %v", len(infos), err)
		}
	}
	candidate := func() {
		t0 := time.Now()
		stale, err := r.Stale(tg)
		candSum += time.Since(t0)
		if err != nil || !stale {
			b.Fatalf("Stale = %v, %v; want true", stale, err)
		}
	}
	benchratio.Compare(b, baseline, candidate)
	if candSum > 0 {
		b.ReportMetric(float64(baseSum)/float64(candSum), "x-faster")
	}

	// Interleaved, every Stale call follows a parse of 10,000 mountinfo lines, which leaves
	// the caches cold; the plugin does not parse mountinfo, so also report Stale on its own.
	const alone = 10_000
	t0 := time.Now()
	for range alone {
		if stale, err := r.Stale(tg); err != nil || !stale {
			b.Fatalf("Stale = %v, %v; want true", stale, err)
		}
	}
	b.ReportMetric(float64(time.Since(t0).Nanoseconds())/alone, "alone-ns/op")
}
