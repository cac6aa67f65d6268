package nri

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// testRuntime is NRI's own runtime side, started in-process: the real plugin connects to it
// over a real unix socket, as it does to containerd.
type testRuntime struct {
	*adaptation.Adaptation
	socket string
	synced chan struct{} // one value per plugin that finished Synchronize
	// took has, per Synchronize of a plugin, how long the plugin took to answer it.
	took chan time.Duration
	// syncFailed counts the Synchronizes the plugin did not answer in time or at all (the
	// runtime then closes the connection: the plugin is dropped until it connects again).
	syncFailed atomic.Int32
}

// nodeSnapshot is what a runtime hands a plugin at Synchronize: its pods and containers.
type nodeSnapshot func() ([]*api.PodSandbox, []*api.Container)

// shortDir returns a temp dir short enough for a unix socket path (108 bytes).
func shortDir(t testing.TB) string {
	dir, err := os.MkdirTemp("/tmp", "mk-nri-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func startRuntime(t testing.TB, socket string) *testRuntime {
	t.Helper()
	return startRuntimeWith(t, socket, nil)
}

// startRuntimeWith starts a runtime that synchronizes a plugin with what snapshot lists (nil:
// nothing), as containerd does with the pods and containers it runs.
func startRuntimeWith(t testing.TB, socket string, snapshot nodeSnapshot) *testRuntime {
	t.Helper()
	dir := filepath.Dir(socket)
	for _, d := range []string{"plugins", "conf"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rt := &testRuntime{socket: socket, synced: make(chan struct{}, 16), took: make(chan time.Duration, 16)}
	var started atomic.Bool // Start syncs the (absent) pre-registered plugins: not a connection
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		var pods []*api.PodSandbox
		var ctrs []*api.Container
		if snapshot != nil && started.Load() {
			pods, ctrs = snapshot()
		}
		start := time.Now()
		_, err := cb(ctx, pods, ctrs)
		if err != nil && started.Load() {
			rt.syncFailed.Add(1)
		}
		if started.Load() {
			select {
			case rt.took <- time.Since(start):
			default:
			}
			rt.synced <- struct{}{}
		}
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	a, err := adaptation.New("test-runtime", "0", sync, update,
		adaptation.WithSocketPath(socket),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf")),
	)
	if err != nil {
		t.Fatalf("create NRI runtime: %v", err)
	}
	if err := a.Start(); err != nil {
		t.Fatalf("start NRI runtime: %v", err)
	}
	started.Store(true)
	rt.Adaptation = a
	return rt
}

func (rt *testRuntime) waitSynced(t testing.TB) {
	t.Helper()
	select {
	case <-rt.synced:
	case <-time.After(10 * time.Second):
		t.Fatal("plugin did not connect and synchronize within 10s")
	}
	// The runtime adds the plugin to its list after the sync callback returns, then releases
	// the sync lock: taking that lock once waits for it.
	rt.BlockPluginSync().Unblock()
}

// conns keeps the plugin's connections so a test can cut them as a dying runtime does:
// adaptation.Stop leaves external plugins connected (a real runtime's exit closes them).
type conns struct {
	mu      sync.Mutex
	all     []net.Conn
	counter *countingDialer // counts failed dials when set
}

func (c *conns) dial(socket string) (net.Conn, error) {
	conn, err := net.Dial("unix", socket)
	c.mu.Lock()
	if err != nil && c.counter != nil {
		c.counter.failed.Add(1)
	}
	c.mu.Unlock()
	if err == nil {
		c.mu.Lock()
		c.all = append(c.all, conn)
		c.mu.Unlock()
	}
	return conn, err
}

func (c *conns) countFailures(d *countingDialer) {
	c.mu.Lock()
	c.counter = d
	c.mu.Unlock()
}

func (c *conns) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.all {
		conn.Close()
	}
	c.all = nil
}

// runPlugin runs p against the socket until the test ends.
func runPlugin(t testing.TB, p *Plugin, socket string) *conns {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cs := &conns{}
	go func() {
		done <- Run(ctx, p, RunOptions{SocketPath: socket, Log: p.log, dial: cs.dial,
			minBackoff: 20 * time.Millisecond, maxBackoff: 100 * time.Millisecond})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("plugin Run: %v", err)
		}
	})
	return cs
}

func createRequest(handler string) *adaptation.CreateContainerRequest {
	return &adaptation.CreateContainerRequest{
		Pod:       &api.PodSandbox{Id: "pod-id", Name: "pod", Namespace: "ns", Uid: "uid", RuntimeHandler: handler},
		Container: &api.Container{Id: "ctr-id", PodSandboxId: "pod-id", Name: "app"},
	}
}

func TestPluginOverNRI(t *testing.T) {
	socket := filepath.Join(shortDir(t), "nri.sock")
	rt := startRuntime(t, socket)
	defer func() { rt.Stop() }()
	host := &specmodtest.Host{Fail: map[string]string{}}
	cs := runPlugin(t, NewPlugin(mustConfig(t, testConfig), true, host, quietLogger()), socket)
	rt.waitSynced(t)

	ctx := context.Background()
	rsp, err := rt.CreateContainer(ctx, createRequest("fast"))
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	got := mountStrings(rsp.GetAdjust().GetMounts())
	want := []string{"/srv/private->/private:rbind,rprivate", "/srv/slave->/slave:rbind,rslave,ro", "/srv/shared->/shared:rbind,rshared,nosuid"}
	if len(got) != len(want) {
		t.Fatalf("adjusted mounts: got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mount %d: got %s, want %s", i, got[i], want[i])
		}
	}

	rsp, err = rt.CreateContainer(ctx, createRequest("kata"))
	if err != nil || len(rsp.GetAdjust().GetMounts()) != 0 {
		t.Errorf("handler without class: mounts %v, err %v", rsp.GetAdjust().GetMounts(), err)
	}

	host.Fail["/srv/shared"] = "host mount point /srv is private"
	_, err = rt.CreateContainer(ctx, createRequest("fast"))
	if err == nil || !strings.Contains(err.Error(), "/srv/shared -> /shared (rshared): host mount point /srv is private") {
		t.Errorf("host problem: the runtime got %v", err)
	}

	// The runtime restarts: the plugin reconnects by itself and serves the next container.
	rt.Stop()
	cs.cut()
	rt = startRuntime(t, socket)
	rt.waitSynced(t)
	delete(host.Fail, "/srv/shared")
	rsp, err = rt.CreateContainer(ctx, createRequest("fast"))
	if err != nil || len(rsp.GetAdjust().GetMounts()) != 3 {
		t.Fatalf("after runtime restart: mounts %v, err %v", rsp.GetAdjust().GetMounts(), err)
	}
}
