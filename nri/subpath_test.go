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

// TestSubPathRepairOverNRI runs the stale-configMap scenario through NRI's runtime side: the
// plugin re-binds the stale subPath target before it answers, or refuses the container naming
// the key that is gone.
func TestSubPathRepairOverNRI(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	dir := shortDir(t)
	t.Cleanup(func() { harness.UnmountAll(dir) })
	kubelet := harness.KubeletPod{Root: filepath.Join(dir, "kubelet"), UID: "uid-1"}
	vol := kubelet.VolumeDir("kubernetes.io~configmap", "cfg")
	if _, err := harness.WriteAtomic(vol, map[string]string{"app.conf": "v1", "gone.conf": "v1"}); err != nil {
		t.Fatal(err)
	}
	app, err := kubelet.BindSubPath(vol, "cfg", "app", 0, "app.conf")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := kubelet.BindSubPath(vol, "cfg", "app", 1, "gone.conf")
	if err != nil {
		t.Fatal(err)
	}
	old, err := harness.WriteAtomic(vol, map[string]string{"app.conf": "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(old); err != nil {
		t.Fatal(err)
	}

	socket := filepath.Join(dir, "nri.sock")
	rt := startRuntime(t, socket)
	defer rt.Stop()
	cfg := mustConfig(t, "kubeletRoot: "+kubelet.Root+"\n")
	runPlugin(t, NewPlugin(cfg, true, &specmodtest.Host{}, quietLogger()), socket)
	rt.waitSynced(t)

	create := func(source string) error {
		req := createRequest("")
		req.Container.Mounts = []*api.Mount{{Source: source, Destination: "/etc/app.conf", Type: "bind", Options: []string{"rbind", "ro"}}}
		_, err := rt.CreateContainer(context.Background(), req)
		return err
	}
	if err := create(app); err != nil {
		t.Fatalf("stale configMap key: %v", err)
	}
	if got, err := os.ReadFile(app); err != nil || string(got) != "v2" {
		t.Errorf("repaired target reads %q, %v; want v2", got, err)
	}
	err = create(gone)
	if err == nil || !strings.Contains(err.Error(), "gone.conf") || !strings.Contains(err.Error(), "cfg") {
		t.Errorf("removed key: got %v, want an error naming gone.conf in volume cfg", err)
	}
}
