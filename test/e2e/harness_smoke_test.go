//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestHarnessSmoke proves the harness end to end: a pod on an extra runtime handler, a
// container with a host bind mount, a privileged container that mounts inside itself, a
// containerd restart with running containers, and a Close that leaves nothing behind.
func TestHarnessSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	begin := time.Now()
	c, err := harness.Start(ctx, harness.Options{Handlers: []string{"mk-test"}, Log: containerdLog()})
	t.Cleanup(func() { _ = c.Close() }) // safe after a failed Start, and after the Close below
	if err != nil {
		t.Fatalf("start harness: %v", err)
	}
	t.Logf("harness started in %v (dir %s)", time.Since(begin).Round(time.Millisecond), c.Dir())
	dir := c.Dir()
	cri := c.CRI()

	host := t.TempDir()
	const content = "hello from the host\n"
	if err := os.WriteFile(filepath.Join(host, "greeting"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}

	pod, err := cri.RunPod(ctx, harness.PodOptions{Name: "smoke", RuntimeHandler: "mk-test"})
	if err != nil {
		t.Fatal(err)
	}
	app, err := cri.CreateContainer(ctx, pod, harness.ContainerOptions{
		Name:   "app",
		Mounts: []harness.Mount{{HostPath: host, ContainerPath: "/data", ReadOnly: true}},
	})
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	if err := cri.StartContainer(ctx, app); err != nil {
		t.Fatal(err)
	}
	expectOutput(ctx, t, cri, app, content, "cat", "/data/greeting")

	priv, err := cri.CreateContainer(ctx, pod, harness.ContainerOptions{Name: "priv", Privileged: true})
	if err != nil {
		t.Fatalf("create privileged container: %v", err)
	}
	if err := cri.StartContainer(ctx, priv); err != nil {
		t.Fatal(err)
	}
	expectOutput(ctx, t, cri, priv, "ok\n", "sh", "-c", "mount -t tmpfs tmpfs /mnt && echo ok >/mnt/f && cat /mnt/f")

	before, err := cri.ContainerStatus(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("containerd restarted in %v", time.Since(begin).Round(time.Millisecond))
	after, err := cri.ContainerStatus(ctx, app)
	if err != nil {
		t.Fatalf("CRI after restart: %v", err)
	}
	if after.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || after.GetStartedAt() != before.GetStartedAt() {
		t.Errorf("after restart: state %v started %d, want running container started %d",
			after.GetState(), after.GetStartedAt(), before.GetStartedAt())
	}
	expectOutput(ctx, t, cri, app, content, "cat", "/data/greeting")

	begin = time.Now()
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	t.Logf("harness closed in %v", time.Since(begin).Round(time.Millisecond))
	if err := c.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	checkNothingLeft(t, dir)
	if _, err := os.Stat(filepath.Join(host, "greeting")); err != nil {
		t.Errorf("host file behind the bind mount: %v", err)
	}
}
