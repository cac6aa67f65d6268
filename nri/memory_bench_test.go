package nri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/internal/metrics"
)

// BenchmarkMemory runs create/remove cycles of class containers through NRI's runtime side and
// compares the process's memory after 10,000 cycles with after 500 (target: within 10 %), so a
// leak per container (a map entry, a goroutine, a copy directory) shows as growth. The plugin
// and the runtime side share this process, so both are measured; heap in use is reported too,
// after a GC, since RSS only grows when the Go runtime keeps freed pages.
func BenchmarkMemory(b *testing.B) {
	plugin := NewPlugin(benchConfig(b), true, NewHostChecker(), quietLogger(), WithMetrics(metrics.New("test")))
	rt := startRuntime(b, filepath.Join(shortDir(b), "nri.sock"))
	defer rt.Stop()
	runPlugin(b, plugin, rt.socket)
	rt.waitSynced(b)
	ctx := context.Background()
	cycles := func(count int) {
		for range count {
			req := numberedRequest("bench")
			if _, err := rt.CreateContainer(ctx, req); err != nil {
				b.Fatal(err)
			}
			if err := rt.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: req.Pod, Container: req.Container}); err != nil {
				b.Fatal(err)
			}
		}
	}
	measure := func() (rss, heap uint64, goroutines int) {
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return rssBytes(b), ms.HeapInuse, runtime.NumGoroutine()
	}
	for range b.N {
		cycles(500)
		rss500, heap500, g500 := measure()
		cycles(9500)
		rss10k, heap10k, g10k := measure()
		ratio := float64(rss10k) / float64(rss500)
		b.ReportMetric(ratio, "rss-ratio")
		b.ReportMetric(float64(heap10k)/float64(heap500), "heap-ratio")
		verdict := "PASS"
		if ratio > 1.10 {
			verdict = "MISS"
		}
		b.Logf("memory: RSS %.1f MiB after 500 cycles, %.1f MiB after 10000: ratio %.3f, target 1.10: %s (heap in use %.1f -> %.1f MiB, goroutines %d -> %d)",
			float64(rss500)/(1<<20), float64(rss10k)/(1<<20), ratio, verdict, float64(heap500)/(1<<20), float64(heap10k)/(1<<20), g500, g10k)
	}
}

// rssBytes is this process's resident set size.
func rssBytes(b *testing.B) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb uint64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}
