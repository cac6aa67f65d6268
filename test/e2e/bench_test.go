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

	"github.com/mountkeeper/mountkeeper/test/benchratio"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// BenchmarkPodStart measures what mountkeeper adds to a pod start on real containerd: one
// iteration is RunPodSandbox, CreateContainer, StartContainer of a busybox container running
// `true`, then removing the pod. The candidate's pod is of a runtime class with three class
// mounts (rprivate, rslave read-only, rshared) that mountkeeper adds with its host checks; the
// baseline's pod has no class and gets the same three mounts as CRI mounts, as kubelet passes
// volumes. Both run with the plugin connected, interleaved, in one run; the target is 1.02.
func BenchmarkPodStart(b *testing.B) {
	testenv.Require(b, append([]string{"root"}, harness.KindContainerd.Binaries()...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir := harness.WorkDir(b, "mk-bench-pod-")
	bin, err := harness.BuildMountkeeper(dir)
	if err != nil {
		b.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	if err := harness.MountTmpfs(src, "shared"); err != nil {
		b.Fatal(err)
	}
	mounts := []harness.Mount{
		{HostPath: src + "/private", ContainerPath: "/vol/private", Propagation: "None"},
		{HostPath: src + "/slave", ContainerPath: "/vol/slave", Propagation: "HostToContainer", ReadOnly: true},
		{HostPath: src + "/shared", ContainerPath: "/vol/shared", Propagation: "Bidirectional"},
	}
	cfg := "stateDir: " + filepath.Join(dir, "state") + "\nruntimeClasses:\n  mk-bench:\n    mounts:\n"
	for _, m := range mounts {
		if err := os.Mkdir(m.HostPath, 0o755); err != nil {
			b.Fatal(err)
		}
		cfg += fmt.Sprintf("      - {source: %s, destination: %s, propagation: %s, readOnly: %t}\n",
			m.HostPath, m.ContainerPath, m.Propagation, m.ReadOnly)
	}
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}

	rt, err := harness.StartRuntime(ctx, harness.KindContainerd, harness.Options{Handlers: []string{"mk-bench"}, NRI: true})
	if err != nil {
		b.Fatalf("start containerd: %v", err)
	}
	defer func() {
		if err := rt.Close(); err != nil {
			b.Errorf("cleanup containerd: %v", err)
		}
	}()
	// The plugin logs at info, as deployed (the harness's default is debug); its log is shown
	// only if the benchmark fails, since a benchmark's log is cut to a few lines.
	plugin, err := harness.StartPlugin(ctx, harness.PluginOptions{Binary: bin, Config: config,
		Socket: rt.NRISocket(), Args: []string{"--log-level", "info"}})
	if err != nil {
		b.Fatalf("start mountkeeper: %v", err)
	}
	defer func() {
		plugin.Stop()
		if b.Failed() {
			b.Logf("mountkeeper log:\n%s", plugin.Log())
		}
	}()

	cri := rt.CRI()
	// start runs one pod with one container and returns the pod and container IDs.
	start := func(handler string, ctrMounts []harness.Mount, args []string) (string, string) {
		pod, err := cri.RunPod(ctx, harness.PodOptions{RuntimeHandler: handler})
		if err != nil {
			b.Fatal(err)
		}
		id, err := cri.CreateContainer(ctx, pod, harness.ContainerOptions{Privileged: true, Mounts: ctrMounts, Args: args})
		if err != nil {
			b.Fatal(err)
		}
		if err := cri.StartContainer(ctx, id); err != nil {
			b.Fatal(err)
		}
		return pod, id
	}
	remove := func(pod string) {
		if err := cri.RemovePod(ctx, pod); err != nil {
			b.Fatal(err)
		}
	}
	// One pod of each first, kept running to check that both see the same three mounts: the
	// first pod also pays for cold caches.
	for _, side := range []struct {
		handler string
		mounts  []harness.Mount
	}{{"mk-bench", nil}, {"", mounts}} {
		pod, id := start(side.handler, side.mounts, []string{"sleep", "3600"})
		out, _, code, err := cri.Exec(ctx, id, "grep", " /vol/", "/proc/self/mountinfo")
		if err != nil || code != 0 || strings.Count(out, "\n") != len(mounts) {
			b.Fatalf("pod of handler %q: want %d mounts below /vol, got (exit %d, %v):\n%s", side.handler, len(mounts), code, err, out)
		}
		remove(pod)
	}
	cycle := func(handler string, ctrMounts []harness.Mount) func() {
		return func() {
			pod, _ := start(handler, ctrMounts, []string{"true"})
			remove(pod)
		}
	}
	benchratio.CompareTarget(b, 1.02, cycle("", mounts), cycle("mk-bench", nil))
}
