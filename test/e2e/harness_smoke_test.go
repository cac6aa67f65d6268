//go:build e2e

package e2e

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// containerdLog sends containerd's output to stderr when MK_CONTAINERD_LOG is set; it is too
// chatty for every run.
func containerdLog() io.Writer {
	if os.Getenv("MK_CONTAINERD_LOG") != "" {
		return os.Stderr
	}
	return nil
}

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

// expectOutput runs cmd in container id and checks it succeeds with stdout want.
func expectOutput(ctx context.Context, t *testing.T, cri *harness.Client, id, want string, cmd ...string) {
	t.Helper()
	stdout, stderr, code, err := cri.Exec(ctx, id, cmd...)
	if err != nil || code != 0 || stdout != want {
		t.Fatalf("exec %q: stdout %q stderr %q exit %d err %v; want stdout %q", cmd, stdout, stderr, code, err, want)
	}
}

// checkNothingLeft looks for traces of the instance in dir: mounts, processes that name it
// or run in its cgroups, cgroups, and the directory itself.
func checkNothingLeft(t *testing.T, dir string) {
	t.Helper()
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			t.Errorf("mount left: %s", line)
		}
	}

	name := filepath.Base(dir) // also the pods' cgroup parent
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		cgroup, _ := os.ReadFile(filepath.Join(p, "cgroup"))
		inCgroup := strings.Contains(string(cgroup), ":/"+name+"/") || strings.Contains(string(cgroup), ":/"+name+"\n")
		if strings.Contains(string(cmdline), dir) || inCgroup {
			t.Errorf("process left: %s %q", p, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}

	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	for _, cg := range cgroups {
		t.Errorf("cgroup left: %s", cg)
	}

	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("instance directory %s still there (stat: %v)", dir, err)
	}
}
