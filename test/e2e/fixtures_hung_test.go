//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

const hungConfig = `
mountTimeout: 4s
runtimeClasses:
  mk-hung:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [SSHOPTS]}
`

func testNetworkHungServer(t *testing.T, kind harness.RuntimeKind) {
	work := harness.WorkDir(t, "mk-hung-")
	sshd := startHelloSSHD(t, work)
	opts := strings.Join(sshd.ClientOptions(), ", ")
	cfg := strings.NewReplacer("EXPORT", sshd.Export(), "SSHOPTS", opts).Replace(hungConfig)
	n := newNode(t, kind, []string{"mk-hung"}, cfg)
	n.endNetworkScopes()
	cri := n.rt.CRI()

	// createPods creates count pods of handler in parallel, a container in each, and returns
	// how long the whole batch took and, for each, its pod, container, error and how long its
	// CreateContainer took.
	type result struct {
		pod, ctr string
		took     time.Duration
		err      error
	}
	var seq int
	var seqMu sync.Mutex
	createPods := func(handler string, count int, start <-chan struct{}) (time.Duration, []result) {
		results := make([]result, count)
		var wg sync.WaitGroup
		names := make([]string, count)
		seqMu.Lock()
		for i := range names {
			seq++
			names[i] = fmt.Sprintf("p%d", seq)
		}
		seqMu.Unlock()
		if start != nil {
			<-start
		}
		begin := time.Now()
		for i := range count {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pod, err := cri.RunPod(n.ctx, harness.PodOptions{Name: names[i], RuntimeHandler: handler})
				if err != nil {
					results[i] = result{err: fmt.Errorf("RunPod: %w", err)}
					return
				}
				t0 := time.Now()
				ctr, err := cri.CreateContainer(n.ctx, pod, harness.ContainerOptions{Name: "app", Privileged: true})
				results[i] = result{pod: pod, ctr: ctr, took: time.Since(t0), err: err}
			}()
		}
		wg.Wait()
		return time.Since(begin), results
	}

	// Warm-up (image, snapshotter), then the baseline: the default batch alone.
	createPods("", 4, nil)
	baseline, res := createPods("", 4, nil)
	for _, r := range res {
		if r.err != nil {
			t.Fatalf("default-runtime pod: %v", r.err)
		}
	}
	t.Logf("baseline: 4 default-runtime pods created in parallel in %s", baseline.Round(time.Millisecond))

	if err := sshd.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sshd.Resume() })
	var classPods []string
	checkRefusals := func(round string, res []result) {
		t.Helper()
		for _, r := range res {
			if r.pod != "" {
				classPods = append(classPods, r.pod)
			}
			if r.err == nil {
				t.Errorf("%s: class container %s created although its server hangs", round, r.ctr)
				continue
			}
			msg := r.err.Error()
			clear := strings.Contains(msg, `runtime class "mk-hung"`) && strings.Contains(msg, "not ready") &&
				(strings.Contains(msg, "127.0.0.1:"+fmt.Sprint(sshd.Port())+" has not answered yet: check that it is up") ||
					strings.Contains(msg, "last error:"))
			if !clear {
				t.Errorf("%s: refusal does not say what is wrong and what to check: %v", round, r.err)
			}
		}
	}

	t.Run("default pods are not held while the class's pods are refused", func(t *testing.T) {
		start := make(chan struct{})
		var classRes []result
		var classTook time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			classTook, classRes = createPods("mk-hung", 6, start)
		}()
		var beside time.Duration
		var defRes []result
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(20 * time.Millisecond) // the class pods go first
			beside, defRes = createPods("", 4, nil)
		}()
		close(start)
		wg.Wait()
		<-done
		for _, r := range defRes {
			if r.err != nil {
				t.Errorf("default-runtime pod beside the hung class: %v", r.err)
			}
		}
		t.Logf("4 default-runtime pods beside 6 class pods of a hung server: %s (baseline %s, %.1fx); the class batch took %s",
			beside.Round(time.Millisecond), baseline.Round(time.Millisecond), float64(beside)/float64(baseline), classTook.Round(time.Millisecond))
		// The design lets a mount's first attempt hold CreateContainer once, for at most
		// FirstWait; beyond that the class must not hold the node's other pods.
		if bound := 3*baseline + netmount.DefaultFirstWait; beside >= bound {
			t.Errorf("default-runtime pods took %s beside the hung class, 3x their baseline plus the one first wait (%s) is %s: the class holds the node", beside, netmount.DefaultFirstWait, bound)
		}
		checkRefusals("first round", classRes)
		if len(classRes) > 0 && classRes[0].err != nil {
			t.Logf("a refusal: %v", classRes[0].err)
		}
	})

	t.Run("retried class pods are refused quickly and clearly", func(t *testing.T) {
		took, res := createPods("mk-hung", 6, nil)
		checkRefusals("retry", res)
		for _, r := range res {
			if r.took >= baseline {
				t.Errorf("a retried class container took %s to be refused, more than the whole 4-pod default baseline %s", r.took, baseline)
			}
		}
		t.Logf("6 retried class pods refused in %s", took.Round(time.Millisecond))
	})

	t.Run("no class container exists", func(t *testing.T) {
		ctrs, err := cri.ListContainers(n.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ctrs {
			for _, p := range classPods {
				if c.GetPodSandboxId() == p {
					t.Errorf("container %s of class pod %s exists: it would run without its mount", c.GetId(), p)
				}
			}
		}
	})

	t.Run("after SIGCONT the next class container works, same plugin", func(t *testing.T) {
		if err := sshd.Resume(); err != nil {
			t.Fatal(err)
		}
		resumed := time.Now()
		var id string
		var last error
		for tries := 1; ; tries++ {
			id, last = n.runContainer("mk-hung", fmt.Sprintf("after-%d", tries))
			if last == nil {
				t.Logf("class container created %s after SIGCONT, try %d", time.Since(resumed).Round(time.Millisecond), tries)
				break
			}
			if time.Since(resumed) > 90*time.Second { // backoff after a 4s mountTimeout: far less
				t.Fatalf("no class container 90s after the server resumed: %v", last)
			}
			time.Sleep(500 * time.Millisecond) // kubelet waits longer
		}
		if out, code := n.sh(id, "cat /data/hello"); code != 0 || out != helloSSHFS {
			t.Errorf("the class container reads %q (exit %d)", out, code)
		}
		if n.plugin.Exited() {
			t.Error("the plugin exited: the class must recover without a restart")
		}
	})
}

// hangGuard runs f, failing the test when it returns an error or has not returned in a
// minute (a hang guard, not a time bound: the runtime's own plugin timeout is 2 s).
func hangGuard(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s has not returned after a minute while a FUSE daemon elsewhere on the node is stopped", what)
	}
}

// stopFUSEUnderHolder mounts an sshfs export below dir (attr_timeout=0: every stat asks the
// daemon), starts a process whose stdin is a file there and whose working directory is the
// mount, and stops the sshfs daemon (SIGSTOP). When the test ends the daemon goes on, and
// holder, mount and daemon go.
func stopFUSEUnderHolder(t *testing.T, dir string) {
	t.Helper()
	sshd := startHelloSSHD(t, dir)
	mnt := filepath.Join(dir, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := "attr_timeout=0,entry_timeout=0," + strings.Join(sshd.ClientOptions(), ",")
	daemon := exec.Command("sshfs", "-f", "-o", opts, "root@127.0.0.1:"+sshd.Export(), mnt)
	daemon.Stderr = testWriter{t, "sshfs"}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	var holder *exec.Cmd
	t.Cleanup(func() {
		_ = daemon.Process.Signal(syscall.SIGCONT)
		if holder != nil {
			_ = holder.Process.Kill()
			_ = holder.Wait()
		}
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		_ = daemon.Process.Kill()
		_ = daemon.Wait()
	})
	hello := filepath.Join(mnt, "hello")
	testsupport.Eventually(t, 30*time.Second, 50*time.Millisecond, "sshfs mounted", func() bool {
		b, err := os.ReadFile(hello)
		return err == nil && string(b) == helloSSHFS
	})
	f, err := os.Open(hello)
	if err != nil {
		t.Fatal(err)
	}
	holder = exec.Command("sleep", "600")
	holder.Stdin, holder.Dir = f, mnt
	err = holder.Start()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Logf("sshfs daemon %d stopped; process %d holds %s", daemon.Process.Pid, holder.Process.Pid, hello)
}
