package nri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/test/benchratio"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// BenchmarkNetworkMount creates containers of an sshfs class (real sshd over loopback, real
// netmount.Manager) through NRI's runtime side: the first one mounts, every later one shares
// that mount. It reports how many host mounts were made ("host-mounts", target 1) and, as
// "ratio", the CreateContainer time of containers 2..N against the same plugin adding a plain
// bind (target within 10%). `make bench` runs it with -benchtime 199x: 200 containers.
func BenchmarkNetworkMount(b *testing.B) {
	dir, sshd := benchSSHD(b)
	if err := os.Mkdir(filepath.Join(dir, "plain"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := harness.MountTmpfs(filepath.Join(dir, "state"), "private"); err != nil {
		b.Fatal(err)
	}
	opts := "[" + strings.Join(sshd.ClientOptions(), ", ") + "]"
	rt, _, _ := mountkeeperRuntime(b, dir, `runtimeClasses:
  sshfs:
    mounts: [{type: fuse.sshfs, source: "root@127.0.0.1:`+sshd.Export()+`", destination: /data, options: `+opts+`}]
  plain:
    mounts: [{source: `+dir+`/plain, destination: /data}]
`)

	ctx := context.Background()
	create := func(handler string) func() {
		return func() {
			rsp, err := rt.CreateContainer(ctx, numberedRequest(handler))
			if err != nil || len(rsp.GetAdjust().GetMounts()) != 1 {
				b.Fatalf("CreateContainer (%s): %d mounts, err %v", handler, len(rsp.GetAdjust().GetMounts()), err)
			}
		}
	}
	// Container 1 mounts (it waits a third of the budget at most, and is retried as the
	// kubelet would if the mount takes longer); it is not part of the comparison.
	first := numberedRequest("sshfs")
	if err := rt.RunPodSandbox(ctx, &adaptation.RunPodSandboxRequest{Pod: first.Pod}); err != nil {
		b.Fatal(err)
	}
	createRetrying(b, rt, first)
	benchratio.Compare(b, create("plain"), create("sshfs"))

	// The host's own count, below the state dir, where the manager mounts.
	hostMounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Join(dir, "state")))
	if err != nil {
		b.Fatal(err)
	}
	sshfs := 0
	for _, m := range hostMounts {
		if m.FSType == "fuse.sshfs" {
			sshfs++
		}
	}
	b.ReportMetric(float64(sshfs), "host-mounts")
	if sshfs != 1 {
		b.Errorf("%d sshfs mounts below %s/state, want 1", sshfs, dir)
	}
}

// benchSSHD is a private mount namespace check, a short work dir (unmounted at the end) and an
// sshd serving an export from it, for the network filesystem benchmarks.
func benchSSHD(b *testing.B) (string, *harness.SSHD) {
	privatens.Require(b)
	dir := shortDir(b)
	b.Cleanup(func() { harness.UnmountAll(dir) })
	sshd, err := harness.StartSSHD(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sshd.Stop)
	return dir, sshd
}
