package nri

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/specmod"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// fakeMounter records what the plugin asks of the network mounter.
type fakeMounter struct {
	mu       sync.Mutex
	ensured  []string
	users    map[string]bool
	released []string
	unused   int
	notReady error
	bySource []string // user=source, of HoldSources
}

func (f *fakeMounter) Ensure(s netspec.Spec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured = append(f.ensured, s.Source)
}

func (f *fakeMounter) Acquire(_ context.Context, s netspec.Spec, user string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notReady != nil {
		return "", f.notReady
	}
	f.users[user] = true
	return "/var/lib/mountkeeper/mounts/" + s.Key(), nil
}

func (f *fakeMounter) Hold(_ netspec.Spec, user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[user] = true
}

// HoldSources holds the mounts below the fake's mounts directory, whatever their key.
func (f *fakeMounter) HoldSources(user string, sources []string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, src := range sources {
		if strings.HasPrefix(src, "/var/lib/mountkeeper/mounts/") {
			f.users[user] = true
			f.bySource = append(f.bySource, user+"="+src)
			n++
		}
	}
	return n
}

func (f *fakeMounter) Release(user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.users, user)
	f.released = append(f.released, user)
}

func (f *fakeMounter) ReleaseUnused() { f.unused++ }

func (f *fakeMounter) releasedSnapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.released)
}

const networkTestConfig = `
runtimeClasses:
  nfs:
    mounts:
      - {type: nfs, source: "filer:/export", destination: /data, propagation: HostToContainer, options: [vers=4.1]}
  plain:
    mounts:
      - {source: /srv/plain, destination: /plain}
`

func networkPlugin(t *testing.T, fm *fakeMounter, host *specmodtest.Host) *Plugin {
	t.Helper()
	p := NewPlugin(mustConfig(t, networkTestConfig), true, host, quietLogger(), WithMounter(
		func(*configs.Config) (Mounter, error) { return fm, nil }))
	if _, err := p.Configure(context.Background(), "", "test", "1"); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNetworkMounts(t *testing.T) {
	ctx := context.Background()
	nfsPod := &api.PodSandbox{Id: "p1", Name: "pod", Namespace: "ns", RuntimeHandler: "nfs"}
	spec := netspec.Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=4.1"}}
	hostPath := "/var/lib/mountkeeper/mounts/" + spec.Key()

	t.Run("RunPodSandbox starts the class's mounts early", func(t *testing.T) {
		fm := &fakeMounter{users: map[string]bool{}}
		p := networkPlugin(t, fm, &specmodtest.Host{})
		p.RunPodSandbox(ctx, nfsPod)
		p.RunPodSandbox(ctx, &api.PodSandbox{RuntimeHandler: "plain"})
		if strings.Join(fm.ensured, ",") != "filer:/export" {
			t.Errorf("ensured %v, want the nfs export only", fm.ensured)
		}
	})

	t.Run("CreateContainer binds the host mount and records the user", func(t *testing.T) {
		fm := &fakeMounter{users: map[string]bool{}}
		host := &specmodtest.Host{}
		p := networkPlugin(t, fm, host)
		adj, _, err := p.CreateContainer(ctx, nfsPod, &api.Container{Id: "c1", Name: "app"})
		if err != nil {
			t.Fatal(err)
		}
		got := mountStrings(adj.GetMounts())
		if len(got) != 1 || got[0] != hostPath+"->/data:rbind,rslave" {
			t.Errorf("mounts %v, want the host mount bound rslave without the nfs options", got)
		}
		if !fm.users["c1"] || strings.Join(host.Asked(), ",") != hostPath {
			t.Errorf("users %v, host asked about %v", fm.users, host.Asked())
		}
		p.RemoveContainer(ctx, nfsPod, &api.Container{Id: "c1"})
		if fm.users["c1"] {
			t.Error("RemoveContainer did not release the container")
		}
	})

	t.Run("a mount not ready fails the container and claims nothing", func(t *testing.T) {
		fm := &fakeMounter{users: map[string]bool{}, notReady: errors.New("nfs filer:/export: not ready: last error: connection refused")}
		p := networkPlugin(t, fm, &specmodtest.Host{})
		_, _, err := p.CreateContainer(ctx, nfsPod, &api.Container{Id: "c2", Name: "app"})
		if err == nil || !strings.Contains(err.Error(), "not ready: last error: connection refused") {
			t.Fatalf("error %v, want the mounter's not-ready error", err)
		}
		if strings.Join(fm.released, ",") != "c2" {
			t.Errorf("released %v, want c2 (no RemoveContainer comes for a container never created)", fm.released)
		}
	})

	t.Run("a host check failing after the mount releases it", func(t *testing.T) {
		fm := &fakeMounter{users: map[string]bool{}}
		p := networkPlugin(t, fm, &specmodtest.Host{Fail: map[string]string{hostPath: "not shared"}})
		if _, _, err := p.CreateContainer(ctx, nfsPod, &api.Container{Id: "c3", Name: "app"}); err == nil {
			t.Fatal("container created although the host check failed")
		}
		if fm.users["c3"] {
			t.Error("the refused container still holds the mount")
		}
	})

	t.Run("Synchronize rebuilds users from running containers", func(t *testing.T) {
		fm := &fakeMounter{users: map[string]bool{}}
		p := networkPlugin(t, fm, &specmodtest.Host{})
		pods := []*api.PodSandbox{nfsPod, {Id: "p2", RuntimeHandler: "plain"}}
		ctrs := []*api.Container{
			{Id: "running", PodSandboxId: "p1", State: api.ContainerState_CONTAINER_RUNNING},
			{Id: "stopped", PodSandboxId: "p1", State: api.ContainerState_CONTAINER_STOPPED},
			{Id: "plain", PodSandboxId: "p2", State: api.ContainerState_CONTAINER_RUNNING},
		}
		if _, err := p.Synchronize(ctx, pods, ctrs); err != nil {
			t.Fatal(err)
		}
		var users []string
		for u := range fm.users {
			users = append(users, u)
		}
		sort.Strings(users)
		if strings.Join(users, ",") != "running" || fm.unused != 1 {
			t.Errorf("users %v, ReleaseUnused called %d times; want [running], 1", users, fm.unused)
		}
	})

	// What a running container's own mounts come from holds, whatever the config says now:
	// its pod's class may be gone (renamed, removed) or its spec changed while the plugin
	// was away.
	t.Run("Synchronize holds the host mounts a running container's mounts come from", func(t *testing.T) {
		fm := &fakeMounter{users: map[string]bool{}}
		p := networkPlugin(t, fm, &specmodtest.Host{})
		old := "/var/lib/mountkeeper/mounts/0123456789abcdef"
		pods := []*api.PodSandbox{{Id: "gone", RuntimeHandler: "renamed-away"}}
		ctrs := []*api.Container{
			{Id: "reader", PodSandboxId: "gone", State: api.ContainerState_CONTAINER_RUNNING,
				Mounts: []*api.Mount{{Source: "/proc", Destination: "/proc"}, {Source: old, Destination: "/data"}}},
			{Id: "stopped", PodSandboxId: "gone", State: api.ContainerState_CONTAINER_STOPPED,
				Mounts: []*api.Mount{{Source: old, Destination: "/data"}}},
		}
		if _, err := p.Synchronize(ctx, pods, ctrs); err != nil {
			t.Fatal(err)
		}
		if strings.Join(fm.bySource, ",") != "reader="+old || fm.unused != 1 {
			t.Errorf("held by source %v, ReleaseUnused called %d times; want [reader=%s], 1", fm.bySource, fm.unused, old)
		}
	})
}

// A config without network mounts still gets a Mounter when an earlier agent left mounts in
// its state directory: they are adopted, held by the running containers that use them and
// released once none does.
func TestMounterForMountsLeftBehind(t *testing.T) {
	for _, left := range []bool{false, true} {
		fm := &fakeMounter{users: map[string]bool{}}
		made := 0
		p := NewPlugin(mustConfig(t, "runtimeClasses:\n  plain:\n    mounts:\n      - {source: /srv/plain, destination: /plain}\n"), true, &specmodtest.Host{}, quietLogger(),
			WithMounter(func(*configs.Config) (Mounter, error) { made++; return fm, nil }),
			WithMountsLeftBehind(func(*configs.Config) bool { return left }))
		if _, err := p.Configure(context.Background(), "", "test", "1"); err != nil {
			t.Fatal(err)
		}
		ctrs := []*api.Container{{Id: "reader", State: api.ContainerState_CONTAINER_RUNNING,
			Mounts: []*api.Mount{{Source: "/var/lib/mountkeeper/mounts/0123456789abcdef", Destination: "/data"}}}}
		if _, err := p.Synchronize(context.Background(), nil, ctrs); err != nil {
			t.Fatal(err)
		}
		want := 0
		if left {
			want = 1
		}
		if made != want || fm.unused != want || len(fm.bySource) != want {
			t.Errorf("mounts left %v: Mounter made %d times, ReleaseUnused %d, held by source %v; want %d each", left, made, fm.unused, fm.bySource, want)
		}
	}
}

// stuckHost answers host checks only once released, as a stat on a dead server would: the
// order (budget first, answer after) holds however loaded the machine is.
type stuckHost struct{ release chan struct{} }

func (h stuckHost) CheckSources([]specmod.Mount) error { <-h.release; return nil }

func TestCreateContainerAnswersWithinTheBudget(t *testing.T) {
	fm := &fakeMounter{users: map[string]bool{}}
	cfg := mustConfig(t, "createBudget: 100ms\n"+networkTestConfig)
	host := stuckHost{release: make(chan struct{})}
	p := NewPlugin(cfg, true, host, quietLogger(), WithMounter(
		func(*configs.Config) (Mounter, error) { return fm, nil }))
	if _, err := p.Configure(context.Background(), "", "test", "1"); err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "p1", Name: "pod", Namespace: "ns", RuntimeHandler: "nfs"}
	_, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Id: "late", Name: "app"})
	close(host.release)
	if err == nil || !strings.Contains(err.Error(), "no answer within createBudget 100ms") {
		t.Fatalf("error %v, want the budget's refusal", err)
	}
	// The late decision acquired the mount for a container that will never exist.
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(fm.releasedSnapshot(), "late") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Contains(fm.releasedSnapshot(), "late") {
		t.Error("the refused container's late claim on the mount was not released")
	}
}
