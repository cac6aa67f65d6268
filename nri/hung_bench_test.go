package nri

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/benchratio"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

// Shape of BenchmarkHungNetworkMount, from a measurement of a hung mount on containerd.
const (
	hungDefaultBatch = 4                      // default-runtime containers created in parallel
	hungClassPods    = 6                      // class pods whose server hangs
	hungClassRetry   = 100 * time.Millisecond // each class pod retries this often (kubelet: >= 10s)
	hungGap          = 20 * time.Millisecond  // at most this long between two batches, not timed
	hungTarget       = 1.10
)

// sshfsClass is a config class mounting export from sshd with sshfs.
func sshfsClass(name string, sshd *harness.SSHD, export, extra string) string {
	return fmt.Sprintf(`  %s:
%s    mounts: [{type: fuse.sshfs, source: "root@127.0.0.1:%s", destination: /data, options: [%s]}]
`, name, extra, export, strings.Join(sshd.ClientOptions(), ", "))
}

// mountkeeperRuntime starts NRI's runtime side in dir with mountkeeper on cfgText (a real
// netmount.Manager, state under dir/state) connected to it.
func mountkeeperRuntime(b *testing.B, dir, cfgText string) (*testRuntime, *configs.Config, func() *netmount.Manager) {
	b.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o700); err != nil {
		b.Fatal(err)
	}
	cfg, err := configs.Parse([]byte("stateDir: " + dir + "/state\n" + cfgText))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, rc := range cfg.RuntimeClasses {
			for _, s := range rc.NetworkSpecs() {
				harness.RemoveMountScope(s.Key())
			}
		}
	})
	var mu sync.Mutex
	var manager *netmount.Manager
	p := NewPlugin(cfg, true, NewHostChecker(), quietLogger(), WithMounter(
		func(c *configs.Config) (Mounter, error) {
			m, err := netmount.NewManager(netmount.ConfigFrom(c, quietLogger()))
			mu.Lock()
			manager = m
			mu.Unlock()
			return m, err
		}))
	rt := startRuntime(b, filepath.Join(dir, "nri.sock"))
	b.Cleanup(rt.Stop)
	runPlugin(b, p, rt.socket)
	rt.waitSynced(b)
	b.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if manager != nil {
			manager.Close()
		}
	})
	return rt, cfg, func() *netmount.Manager { mu.Lock(); defer mu.Unlock(); return manager }
}

var benchCtrSeq atomic.Int64

// numberedRequest is a CreateContainer request for a container of handler in a pod of its own,
// numbered across the benchmarks of this process.
func numberedRequest(handler string) *adaptation.CreateContainerRequest {
	n := benchCtrSeq.Add(1)
	req := createRequest(handler)
	req.Pod.Id, req.Pod.Name = fmt.Sprintf("pod-%d", n), fmt.Sprintf("pod-%d", n)
	req.Container.Id, req.Container.PodSandboxId = fmt.Sprintf("ctr-%d", n), req.Pod.Id
	return req
}

// createIn creates one container of handler in its own pod and returns the error.
func createIn(rt *testRuntime, handler string) error {
	_, err := rt.CreateContainer(context.Background(), numberedRequest(handler))
	return err
}

// createRetrying creates the container of req as the kubelet would while its network mount is
// not ready yet: a refusal is retried every 50ms, 100 times at most. It returns the answer and
// how many times the container was refused.
func createRetrying(b *testing.B, rt *testRuntime, req *adaptation.CreateContainerRequest) (*adaptation.CreateContainerResponse, int) {
	b.Helper()
	for refused := 0; ; refused++ {
		rsp, err := rt.CreateContainer(context.Background(), req)
		if err == nil {
			return rsp, refused
		}
		if refused == 100 {
			b.Fatalf("%s: %v", req.Pod.RuntimeHandler, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitStatus waits up to 20s until the manager's mounts are as ok says, else fails with
// failure.
func waitStatus(b *testing.B, manager func() *netmount.Manager, failure string, ok func([]netmount.MountStatus) bool) {
	b.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(manager().Status()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal(failure)
		}
	}
}

// defaultBatch waits up to hungGap (not timed: so that the benchmark spans many retries of
// the class pods), then creates hungDefaultBatch default-runtime containers in parallel and
// returns how long that took.
func defaultBatch(b *testing.B, rt *testRuntime) time.Duration {
	time.Sleep(rand.N(hungGap))
	var wg sync.WaitGroup
	start := time.Now()
	for range hungDefaultBatch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := createIn(rt, ""); err != nil {
				b.Errorf("default-runtime container: %v", err)
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkHungNetworkMount: the runtime creates the containers of a whole node under one
// lock while a plugin answers (CONTEXT.md, NRI facts), so a plugin that waits for a network
// mount holds every container of the node. Default-runtime containers, hungDefaultBatch at a
// time in parallel, are created on a node alone (baseline) and on a node where hungClassPods
// pods of an sshfs class whose server hangs (sshd stopped with SIGSTOP: TCP connects, nothing
// answers) keep retrying (candidate), each every hungClassRetry, far more often than the
// kubelet's back-off of at least 10 s; batches come up to hungGap apart, so the run spans many
// retries. Both nodes are NRI's runtime side in-process with the real plugin and
// netmount.Manager. Target: ratio <= hungTarget. It also reports how long a class container's
// refusal took as its client saw it, after the first round (refusal-ms, mean; refusal-max-ms),
// and fails if any class container was created (its mount cannot exist).
func BenchmarkHungNetworkMount(b *testing.B) {
	dir, sshd := benchSSHD(b)
	if err := sshd.Pause(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sshd.Resume() })
	cfgText := "runtimeClasses:\n" + sshfsClass("hung", sshd, sshd.Export(), "")
	alone, _, _ := mountkeeperRuntime(b, filepath.Join(dir, "alone"), cfgText)
	beside, _, _ := mountkeeperRuntime(b, filepath.Join(dir, "beside"), cfgText)

	// The class pods, retrying until the benchmark ends.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var refusals int
	var refusalSum, refusalMax time.Duration
	var created atomic.Int64
	firstDone := make(chan struct{})
	var firstOnce sync.Once
	for range hungClassPods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := time.Now()
				err := createIn(beside, "hung")
				took := time.Since(start)
				firstOnce.Do(func() { close(firstDone) })
				if err == nil {
					created.Add(1)
				} else if !strings.Contains(err.Error(), "not ready") {
					b.Errorf("class container refused for another reason: %v", err)
				}
				mu.Lock()
				refusals++
				refusalSum += took
				refusalMax = max(refusalMax, took)
				mu.Unlock()
				select {
				case <-stop:
					return
				case <-time.After(hungClassRetry):
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	<-firstDone // the mount's first attempt is under way and the first refusal answered
	time.Sleep(hungClassRetry + hungClassRetry/2)
	mu.Lock()
	b.Logf("first round: %d class containers refused, mean %s, max %s (the mount's first attempt may be waited for)",
		refusals, (refusalSum / time.Duration(max(refusals, 1))).Round(time.Microsecond), refusalMax.Round(time.Microsecond))
	refusals, refusalSum, refusalMax = 0, 0, 0
	mu.Unlock()

	base, cand := benchratio.CompareTimed(b, func() time.Duration { return defaultBatch(b, alone) },
		func() time.Duration { return defaultBatch(b, beside) })
	if b.N < 10 {
		b.Logf("%d iterations: too few for a verdict (the run with -benchtime 200x gives it)", b.N)
	} else {
		b.Log(benchratio.Verdict(fmt.Sprintf("%d default-runtime containers beside %d class pods of a hung sshfs server vs alone", hungDefaultBatch, hungClassPods), base, cand, hungTarget))
	}
	mu.Lock()
	if refusals > 0 {
		b.ReportMetric(float64(refusalSum)/float64(time.Millisecond)/float64(refusals), "refusal-ms")
		b.ReportMetric(float64(refusalMax)/float64(time.Millisecond), "refusal-max-ms")
		b.Logf("later class containers: %d refused, mean %s, max %s as their client saw it (queueing for the node-wide lock included)",
			refusals, (refusalSum / time.Duration(refusals)).Round(time.Microsecond), refusalMax.Round(time.Microsecond))
	}
	mu.Unlock()
	if n := created.Load(); n > 0 {
		b.Errorf("%d class containers created although their server hangs", n)
	}
}

// BenchmarkNetworkFirstPod: the first pod of a healthy sshfs class, its mount included,
// against a pod of a class whose source is the same export mounted by hand beforehand (a bind
// class). "on-demand": RunPodSandbox, then at once CreateContainer, with nothing mounted yet
// (each iteration ends with the container removed and the mount gone after its grace period);
// a refusal is retried every 50ms and counted (first-refusals). "eager": a class with
// networkMount: eager, mounted when the plugin started; its pod comes as the first one.
func BenchmarkNetworkFirstPod(b *testing.B) {
	dir, sshd := benchSSHD(b)
	for _, d := range []string{filepath.Join(sshd.Export(), "eager"), filepath.Join(dir, "byhand")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	// The same export, mounted by hand.
	byHand := filepath.Join(dir, "byhand")
	opts := strings.Join(append(sshd.ClientOptions(), "allow_other", "default_permissions"), ",")
	if out, err := exec.Command("mount", "-t", "fuse.sshfs", "-o", opts, "root@127.0.0.1:"+sshd.Export(), byHand).CombinedOutput(); err != nil {
		b.Fatalf("mount sshfs by hand: %v: %s", err, out)
	}
	b.Cleanup(func() { exec.Command("umount", "-l", byHand).Run() })

	classes := "unmountGrace: 1ms\nruntimeClasses:\n" + sshfsClass("ondemand", sshd, sshd.Export(), "") +
		"  byhand:\n    mounts: [{source: " + byHand + ", destination: /data}]\n"
	classes += sshfsClass("eager", sshd, filepath.Join(sshd.Export(), "eager"), "    networkMount: eager\n")
	rt, cfg, manager := mountkeeperRuntime(b, filepath.Join(dir, "node"), classes)
	ctx := context.Background()

	pod := func(handler string) func() time.Duration {
		return func() time.Duration {
			req := numberedRequest(handler)
			start := time.Now()
			if err := rt.RunPodSandbox(ctx, &adaptation.RunPodSandboxRequest{Pod: req.Pod}); err != nil {
				b.Fatal(err)
			}
			rsp, refused := createRetrying(b, rt, req)
			took := time.Since(start)
			if len(rsp.GetAdjust().GetMounts()) != 1 {
				b.Fatalf("%s: %d mounts", handler, len(rsp.GetAdjust().GetMounts()))
			}
			if refused > 0 {
				b.Logf("%s: first pod refused %d times before its mount was ready", handler, refused)
				b.ReportMetric(float64(refused), "first-refusals")
			}
			if err := rt.RemoveContainer(ctx, &adaptation.RemoveContainerRequest{Pod: req.Pod, Container: req.Container}); err != nil {
				b.Fatal(err)
			}
			return took
		}
	}
	ondemand := pod("ondemand")
	key := cfg.RuntimeClasses["ondemand"].NetworkSpecs()[0].Key()
	firstPod := func() time.Duration {
		took := ondemand()
		// Not timed: the grace period (1ms) ends and the mount goes, for the next first pod.
		waitStatus(b, manager, "the on-demand mount is still there 20s after its last container went", func(sts []netmount.MountStatus) bool {
			return !slices.ContainsFunc(sts, func(st netmount.MountStatus) bool { return st.Key == key })
		})
		return took
	}
	b.Run("on-demand-first-pod-vs-by-hand", func(b *testing.B) {
		base, cand := benchratio.CompareTimed(b, pod("byhand"), firstPod)
		b.Logf("first pod of an on-demand class, mount included: %s; a pod on the same export mounted by hand: %s (ratio %.0f)",
			cand.Round(time.Millisecond), base.Round(time.Microsecond), float64(cand)/float64(base))
	})
	// The eager mount was started with the plugin: wait until it is there.
	eagerKey := cfg.RuntimeClasses["eager"].NetworkSpecs()[0].Key()
	waitStatus(b, manager, "the eager class's mount is not ready 20s after the plugin started", func(sts []netmount.MountStatus) bool {
		return slices.ContainsFunc(sts, func(st netmount.MountStatus) bool { return st.Key == eagerKey && st.State == "mounted" })
	})
	b.Run("eager-first-pod-vs-by-hand", func(b *testing.B) {
		base, cand := benchratio.CompareTimed(b, pod("byhand"), pod("eager"))
		b.Logf("first pod of an eager class (mounted when the plugin started): %s; a pod on the same export mounted by hand: %s (ratio %.3f)",
			cand.Round(time.Microsecond), base.Round(time.Microsecond), float64(cand)/float64(base))
	})
}
