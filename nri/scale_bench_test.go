package nri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"

	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// scaleRow is one node size of BenchmarkScale.
type scaleRow struct {
	pods                 int
	plugin, alone, share time.Duration // CreateContainer medians: through the agent, the runtime side alone, the difference
	sync                 time.Duration // Synchronize after a restart, answered
	resumed              time.Duration // until every live path is followed again
	dropped              int
	rssMiB               float64
	goroutines, threads  int
	fds                  int
	mountsPerPod         float64 // host mounts added per pod (all of them)
	ownPerPod            float64 // of which mountkeeper's (below its copy directory)
	fanVols              int
	p50, p99             time.Duration
}

// BenchmarkScale is the scale table: nodes of 10, 110 and 260 running pods, each with its own
// configMap volume in kubelet's layout and a file subPath of it in a class with
// subPathUpdates: live (one live path per pod), on NRI's own runtime side in-process (the
// agent over a real socket; no containerd, whose own time at 260 pods would not fit the
// bench's budget here). Per size: the agent's own share of CreateContainer (through the
// agent minus the same runtime side with no plugin, interleaved in the same run), Synchronize
// of a restarted agent, the process's RSS, goroutines, OS threads and descriptors, host mounts
// added per pod, and the live fan-out with half the volumes updated at once (130 at 260).
func BenchmarkScale(b *testing.B) {
	privatens.Require(b)
	var rows []scaleRow
	for _, n := range []int{10, 110, 260} {
		b.Run(fmt.Sprintf("pods-%d", n), func(b *testing.B) {
			for range b.N {
				rows = append(rows, scaleAt(b, n))
			}
			if n == 260 {
				scaleTable(b, rows)
			}
		})
	}
}

// scaleTable logs rows, each value next to its goal.
func scaleTable(b *testing.B, rows []scaleRow) {
	b.Logf("scale: in-process NRI runtime side (not containerd), agent over a real unix socket, real mounts; one live subPath per pod")
	b.Logf("scale: %5s %-41s %12s %12s %8s %5s %7s %4s %-24s %-30s", "pods", "CreateContainer agent share (total-alone)", "sync", "resumed", "RSS MiB", "gor", "threads", "fds", "mounts/pod (agent's)", "fan-out p50/p99")
	for _, r := range rows {
		b.Logf("scale: %5d %-41s %12s %12s %8.1f %5d %7d %4d %-24s %-30s", r.pods,
			fmt.Sprintf("%s (%s-%s)", r.share.Round(time.Microsecond), r.plugin.Round(time.Microsecond), r.alone.Round(time.Microsecond)),
			r.sync.Round(100*time.Microsecond), r.resumed.Round(time.Millisecond), r.rssMiB, r.goroutines, r.threads, r.fds,
			fmt.Sprintf("%.2f (%.2f)", r.mountsPerPod, r.ownPerPod),
			fmt.Sprintf("%d vols: %s / %s", r.fanVols, r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond)))
	}
	first, last := rows[0], rows[len(rows)-1]
	if first.pods != 10 || last.pods != 260 {
		return
	}
	ratio := float64(last.share) / float64(max(first.share, time.Microsecond))
	b.Logf("scale: goal: agent's CreateContainer share at 260 / at 10 = %.2f (goal <= 1.10: %s)", ratio, verdict(ratio <= 1.10))
	b.Logf("scale: goal: Synchronize at 260 answered in %s, dropped %d times (goal <= 200 ms, 0 drops: %s)", last.sync.Round(100*time.Microsecond), last.dropped, verdict(last.sync <= 200*time.Millisecond && last.dropped == 0))
	b.Logf("scale: goal: fan-out of %d volumes at 260 p99 %s (goal <= 100 ms: %s)", last.fanVols, last.p99.Round(100*time.Microsecond), verdict(last.p99 <= 100*time.Millisecond))
	b.Logf("scale: goal: goroutines %d at 10 -> %d at 260, threads %d -> %d, RSS %.1f -> %.1f MiB, fds %d -> %d (process-wide: runtime side, agent and bench; fds hold each pod's copy tmpfs, once per agent that made or resumed it, the stopped first agent's included; goal: no goroutine or thread per pod: %s)",
		first.goroutines, last.goroutines, first.threads, last.threads, first.rssMiB, last.rssMiB, first.fds, last.fds, verdict(last.goroutines <= first.goroutines+2 && last.threads <= first.threads+updateWorkersBound))
	b.Logf("scale: host mounts added per pod: %.2f at 260, %.2f of them the agent's (goal: no more than the live paths need: 2 per live pod, a base and the runtime's bind of it; the rest is the bench's kubelet subPath bind)", last.mountsPerPod, last.ownPerPod)
}

func verdict(met bool) string {
	if met {
		return "MET"
	}
	return "NOT MET"
}

// scaleAt measures one node of n pods.
func scaleAt(b *testing.B, n int) scaleRow {
	r := scaleRow{pods: n}
	mounts0 := mountCount(b, "")
	s := newScaleNode(b, n)
	start := time.Now()
	took, p, rt, stop := s.syncAfterRestart(b)
	defer stop()
	waitLive(b, p, n)
	r.sync, r.resumed, r.dropped = took, time.Since(start), int(rt.syncFailed.Load())
	r.mountsPerPod = float64(mountCount(b, "")-mounts0) / float64(n)
	r.ownPerPod = float64(mountCount(b, p.subPathCopies().Dir)) / float64(n)

	// CreateContainer of new pods on the full node, through the agent and through the same
	// runtime side with no plugin, interleaved.
	alone := startRuntime(b, filepath.Join(s.dir, "alone.sock"))
	defer alone.Stop()
	const creates = 31
	var withAgent, without []time.Duration
	for i := range creates {
		pod, ctr, _ := s.newPod(b, fmt.Sprintf("new%02d", i))
		req := func() *adaptation.CreateContainerRequest {
			return &adaptation.CreateContainerRequest{Pod: pod, Container: cloneContainer(ctr)}
		}
		t0 := time.Now()
		if _, err := alone.CreateContainer(context.Background(), req()); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := rt.CreateContainer(context.Background(), req()); err != nil {
			b.Fatal(err)
		}
		withAgent, without = append(withAgent, time.Since(t1)), append(without, t1.Sub(t0))
		if err := rt.RemoveContainer(context.Background(), &adaptation.RemoveContainerRequest{Pod: pod, Container: ctr}); err != nil {
			b.Fatal(err)
		}
	}
	r.plugin, r.alone = median(withAgent), median(without)
	r.share = r.plugin - r.alone

	runtime.GC()
	r.rssMiB = float64(procStatusKiB(b, "VmRSS:")) / 1024
	r.goroutines, r.threads = runtime.NumGoroutine(), osThreads(b)
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		r.fds = len(ents)
	}

	r.fanVols = n / 2
	lat := liveFanOut(b, s, r.fanVols, 3)
	r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return r
}

// mountCount counts this mount namespace's mounts, those at or below under if under is set.
func mountCount(t testing.TB, under string) int {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if under == "" || f[4] == under || strings.HasPrefix(f[4], under+"/") {
			n++
		}
	}
	return n
}

// procStatusKiB is a "<key> <n> kB" line of /proc/self/status.
func procStatusKiB(t testing.TB, key string) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// liveFanOut updates the first vols volumes of s at once, rounds times, and returns, sorted,
// the time from each volume's swap until its container's copy shows the new content.
func liveFanOut(t testing.TB, s *scaleNode, vols, rounds int) []time.Duration {
	t.Helper()
	read := func(f string) string { d, _ := os.ReadFile(f); return string(d) }
	var lat []time.Duration
	for i := range rounds {
		want := fmt.Sprintf("fan%d-%d", vols, i)
		swapped, seen := make([]time.Time, vols), make([]time.Time, vols)
		done := make(chan int)
		go func() { // watches from before the first swap, so that no latency waits for the writes
			left := vols
			for deadline := time.Now().Add(60 * time.Second); left > 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				for j, f := range s.files[:vols] {
					if seen[j].IsZero() && read(f) == want {
						seen[j] = time.Now()
						left--
					}
				}
			}
			done <- left
		}()
		swapVolumes(t, s.vols[:vols], want, swapped)
		if left := <-done; left > 0 {
			t.Fatalf("%d of %d copies did not show %s within 60s", left, vols, want)
		}
		for j := range seen {
			lat = append(lat, seen[j].Sub(swapped[j]))
		}
	}
	slices.Sort(lat)
	return lat
}
