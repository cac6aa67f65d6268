//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestImageIndexImport imports `make image`'s multi-architecture image (an image index for
// amd64 and arm64) into a real containerd the way docs/install.md says (ctr images import),
// and runs `mountkeeper version` from it: containerd picks this machine's manifest, and the
// binary it gets runs here.
func TestImageIndexImport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	archs := []string{"amd64", "arm64"}
	var platforms []harness.AgentPlatform
	for _, arch := range archs {
		for _, cmd := range harness.AgentCommands {
			if _, err := harness.BuildFor(dir, arch, cmd); err != nil {
				t.Fatal(err)
			}
		}
		p, err := harness.ReadAgentPlatform(dir, arch)
		if err != nil {
			t.Fatal(err)
		}
		platforms = append(platforms, p)
	}
	const image = harness.AgentImageRepository + ":e2e-index"
	archive, err := harness.AgentImageIndexArchive(image, platforms)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		t.Fatal(err)
	}

	c, err := harness.Start(ctx, harness.Options{Log: containerdLog()})
	t.Cleanup(func() { _ = c.Close() })
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	if err := c.ImportImage(ctx, path, image); err != nil {
		t.Fatal(err)
	}
	cri := c.CRI()
	pod, err := cri.RunPod(ctx, harness.PodOptions{Name: "image"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := cri.CreateContainer(ctx, pod, harness.ContainerOptions{Name: "version", Image: image, Args: []string{"version"}})
	if err != nil {
		t.Fatalf("create a container of %s: %v", image, err)
	}
	if err := cri.StartContainer(ctx, id); err != nil {
		t.Fatalf("start `mountkeeper version` from %s (%s): %v", image, runtime.GOARCH, err)
	}
	for {
		st, err := cri.ContainerStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			if st.GetExitCode() != 0 {
				t.Fatalf("`mountkeeper version` from %s exited %d (%s: %s)", image, st.GetExitCode(), st.GetReason(), st.GetMessage())
			}
			t.Logf("`mountkeeper version` from the %s manifest of %s exited 0", runtime.GOARCH, image)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("`mountkeeper version` from %s still %s", image, st.GetState())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
