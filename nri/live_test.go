package nri

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/metrics"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestLiveSubPathOverNRI wires live subPath updates through NRI's runtime side: a pod of a
// class with subPathUpdates: live, and one of a podOptIn class with the annotation, get their
// configMap subPath bound rslave from a copy that follows an update once the container
// started; a pod of no class, and one of the podOptIn class without the annotation (or with
// another value), keep the content they started with, bound as kubelet binds it (rprivate).
// Status and metrics count the live copies and the updates; StopContainer stops following,
// RemoveContainer leaves no copy and no mount.
func TestLiveSubPathOverNRI(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	dir, kubelet, vol := configMapPod(t, map[string]string{"app.conf": "v1"})
	socket := filepath.Join(dir, "nri.sock")
	rt := startRuntime(t, socket)
	defer rt.Stop()
	state := filepath.Join(dir, "state")
	cfg := mustConfig(t, "kubeletRoot: "+kubelet.Root+"\nstateDir: "+state+"\nruntimeClasses:\n  live: {subPathUpdates: live}\n  optin: {subPathUpdates: podOptIn}\n")
	m := metrics.New("test")
	plugin := NewPlugin(cfg, true, &specmodtest.Host{}, quietLogger(), WithMetrics(m))
	runPlugin(t, plugin, socket)
	rt.waitSynced(t)

	type ctr struct {
		id, handler, annotation string
		live                    bool
		src                     string
	}
	ctrs := []*ctr{
		{id: "ctr-live", handler: "live", live: true},
		{id: "ctr-none", handler: ""},
		{id: "ctr-optin", handler: "optin", annotation: "true", live: true},
		{id: "ctr-optout", handler: "optin"},
		{id: "ctr-other", handler: "optin", annotation: "yes"},
	}
	pod := func(c *ctr) *api.PodSandbox {
		p := createRequest(c.handler).Pod
		if c.annotation != "" {
			p.Annotations = map[string]string{configs.LiveSubPathsAnnotation: c.annotation}
		}
		return p
	}
	container := func(c *ctr) *api.Container {
		return &api.Container{Id: c.id, PodSandboxId: "pod-id", Name: "app", State: api.ContainerState_CONTAINER_RUNNING}
	}
	for i, c := range ctrs {
		target, err := kubelet.BindSubPath(vol, "cfg", "app", i, "app.conf")
		if err != nil {
			t.Fatal(err)
		}
		ac := container(c)
		ac.Mounts = []*api.Mount{{Source: target, Destination: "/etc/app.conf", Type: "bind", Options: []string{"rbind", "rprivate", "ro"}}}
		resp, err := rt.CreateContainer(context.Background(), &adaptation.CreateContainerRequest{Pod: pod(c), Container: ac})
		if err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		for _, am := range resp.GetAdjust().GetMounts() {
			if am.Destination != "/etc/app.conf" {
				continue
			}
			c.src = am.Source
			want := []string{"rbind", "ro", "rslave"}
			if !c.live {
				want = []string{"rbind", "rprivate", "ro"}
			}
			if !slices.Equal(slices.Sorted(slices.Values(am.Options)), slices.Sorted(slices.Values(want))) {
				t.Errorf("%s: the copy is bound with %v, want %v", c.id, am.Options, want)
			}
		}
		if !strings.HasPrefix(c.src, filepath.Join(state, "subpath")) {
			t.Fatalf("%s: bound from %q, want a copy", c.id, c.src)
		}
		if err := rt.PostStartContainer(context.Background(), &adaptation.PostStartContainerRequest{Pod: pod(c), Container: container(c)}); err != nil {
			t.Fatal(err)
		}
	}
	old, err := harness.WriteAtomic(vol, map[string]string{"app.conf": "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(old); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	for _, c := range ctrs {
		want := "v1"
		if c.live {
			want = "v2"
		}
		for deadline := time.Now().Add(10 * time.Second); read(c.src) != want && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		}
		if got := read(c.src); got != want {
			t.Errorf("%s reads %q after the update, want %q", c.id, got, want)
		}
	}
	// The counts come right after the switch: wait for them, bounded. The follower counts an
	// update for status first and then tells the plugin, which counts it for the metric: both.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st := plugin.Status().LiveSubPaths; st != nil && st.Updates["applied"] == 2 &&
			scrape(t, m, "mountkeeper_live_subpath_updates_total", map[string]string{"result": "applied"}) == 2 {
			break
		}
	}
	if st := plugin.Status().LiveSubPaths; st == nil || st.Paths != 2 || st.Updates["applied"] != 2 {
		t.Errorf("status: %+v, want 2 live paths and 2 updates applied", st)
	}
	if got := scrape(t, m, "mountkeeper_live_subpath_updates_total", map[string]string{"result": "applied"}); got != 2 {
		t.Errorf("mountkeeper_live_subpath_updates_total{result=applied} = %v, want 2", got)
	}
	if got := scrape(t, m, "mountkeeper_live_subpath_paths", nil); got != 2 {
		t.Errorf("mountkeeper_live_subpath_paths = %v, want 2", got)
	}

	if _, err := rt.StopContainer(context.Background(), &adaptation.StopContainerRequest{Pod: pod(ctrs[0]), Container: container(ctrs[0])}); err != nil {
		t.Fatal(err)
	}
	if st := plugin.Status().LiveSubPaths; st == nil || st.Paths != 1 {
		t.Errorf("status after StopContainer: %+v, want 1 live path", st)
	}
	for _, c := range ctrs {
		if err := rt.RemoveContainer(context.Background(), &adaptation.RemoveContainerRequest{Pod: pod(c), Container: container(c)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "subpath", "uid-1")); !os.IsNotExist(err) {
		t.Errorf("RemoveContainer left copies: %v", err)
	}
	if ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Join(state, "subpath", "uid-1"))); len(ms) != 0 {
		t.Errorf("RemoveContainer left %d mounts below the copies", len(ms))
	}
	if st := plugin.Status().LiveSubPaths; st == nil || st.Paths != 0 {
		t.Errorf("status after RemoveContainer: %+v, want no live path", st)
	}
}
