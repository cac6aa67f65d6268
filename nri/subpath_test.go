package nri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestSubPathCopyOverNRI runs the configMap update race through NRI's runtime side: a subPath
// of a configMap key is replaced by a private copy of the key's content at CreateContainer, so
// an update that lands after CreateContainer (kubernetes #127602) cannot make it stale; a key
// that is gone keeps kubelet's (stale) bind, for the runtime to fail on as without mountkeeper,
// and leaves no copy; RemoveContainer removes the copies.
func TestSubPathCopyOverNRI(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	dir, kubelet, vol := configMapPod(t, map[string]string{"app.conf": "v1", "gone.conf": "v1"})
	app, err := kubelet.BindSubPath(vol, "cfg", "app", 0, "app.conf")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := kubelet.BindSubPath(vol, "cfg", "app", 1, "gone.conf")
	if err != nil {
		t.Fatal(err)
	}
	update := func(files map[string]string) {
		t.Helper()
		old, err := harness.WriteAtomic(vol, files)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(old); err != nil {
			t.Fatal(err)
		}
	}

	socket := filepath.Join(dir, "nri.sock")
	rt := startRuntime(t, socket)
	defer rt.Stop()
	state := filepath.Join(dir, "state")
	cfg := mustConfig(t, "kubeletRoot: "+kubelet.Root+"\nstateDir: "+state+"\n")
	plugin := NewPlugin(cfg, true, &specmodtest.Host{}, quietLogger())
	runPlugin(t, plugin, socket)
	rt.waitSynced(t)

	// create returns the source the container's /etc/app.conf is bound from.
	create := func(id, source string) (string, error) {
		req := createRequest("")
		req.Container.Id = id
		req.Container.Mounts = []*api.Mount{{Source: source, Destination: "/etc/app.conf", Type: "bind", Options: []string{"rbind", "ro"}}}
		resp, err := rt.CreateContainer(context.Background(), req)
		if err != nil {
			return "", err
		}
		// The runtime side merges the plugin's RemoveMount + AddMount into the new mount.
		for _, m := range resp.GetAdjust().GetMounts() {
			if m.Destination == "/etc/app.conf" {
				if !strings.Contains(strings.Join(m.Options, ","), "ro") {
					t.Errorf("the copy's mount lost the options of kubelet's: %v", m.Options)
				}
				return m.Source, nil
			}
		}
		return source, nil
	}
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		return string(b)
	}

	src1, err := create("ctr-1", app)
	if err != nil {
		t.Fatalf("fresh configMap key: %v", err)
	}
	if src1 == app || !strings.HasPrefix(src1, filepath.Join(state, "subpath", "uid-1", "ctr-1")) {
		t.Fatalf("the subPath mount is bound from %s, want a private copy below %s", src1, filepath.Join(state, "subpath"))
	}
	update(map[string]string{"app.conf": "v2"}) // lands after CreateContainer, before the mount
	if got := read(src1); got != "v1" {
		t.Errorf("the copy reads %q after the update, want the v1 it was created with", got)
	}

	src2, err := create("ctr-2", app) // kubelet's bind is stale now: the copy reads ..data
	if err != nil {
		t.Fatalf("stale configMap key: %v", err)
	}
	if got := read(src2); got != "v2" {
		t.Errorf("a container created after the update reads %q, want v2", got)
	}

	src3, err := create("ctr-3", gone)
	if err != nil || src3 != gone {
		t.Errorf("removed key: bound from %s, %v; want kubelet's bind %s, not a refusal", src3, err, gone)
	}
	if _, err := os.Stat(filepath.Join(state, "subpath", "uid-1", "ctr-3")); !os.IsNotExist(err) {
		t.Errorf("a refused container's copies are left behind: %v", err)
	}

	req := createRequest("")
	req.Container.Id = "ctr-1"
	if err := rt.RemoveContainer(context.Background(), &api.RemoveContainerRequest{Pod: req.Pod, Container: req.Container}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, "subpath", "uid-1", "ctr-1")); !os.IsNotExist(err) {
		t.Errorf("RemoveContainer left the copies: %v", err)
	}
	if got := read(src2); got != "v2" {
		t.Errorf("removing ctr-1 touched ctr-2's copy: %q", got)
	}

	// A reload that turns copies off removes the copies left, secrets among them.
	if err := plugin.ReloadConfig([]byte("kubeletRoot: "+kubelet.Root+"\nstateDir: "+state+"\nsubPathRepair: false\nruntimeClasses: {x: {mounts: [{source: /srv/x, destination: /x}]}}\n"), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, "subpath", "uid-1", "ctr-2")); !os.IsNotExist(err) {
		t.Errorf("copies left after a reload turned them off: %v", err)
	}
}

// configMapPod is pod uid-1 of a kubelet root in a short temporary directory (unmounted when
// the test ends) with configMap volume cfg written as the atomic writer does.
func configMapPod(t *testing.T, files map[string]string) (dir string, kubelet harness.KubeletPod, vol string) {
	t.Helper()
	dir = shortDir(t)
	t.Cleanup(func() { harness.UnmountAll(dir) })
	kubelet = harness.KubeletPod{Root: filepath.Join(dir, "kubelet"), UID: "uid-1"}
	vol = kubelet.VolumeDir("kubernetes.io~configmap", "cfg")
	if _, err := harness.WriteAtomic(vol, files); err != nil {
		t.Fatal(err)
	}
	return dir, kubelet, vol
}
