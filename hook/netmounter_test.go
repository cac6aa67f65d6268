package hook

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// A hook finds a live mount and returns at once, even while the NRI plugin holds the state
// directory's lock: it must neither wait for that lock nor fail on it.
func TestHookNetworkFindsALiveMountWhileThePluginRuns(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	dir := t.TempDir()
	spec := netspec.Spec{Type: "nfs", Source: "srv:/export"}
	hostPath := netmount.HostPath(dir, spec)
	if err := os.MkdirAll(hostPath, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", hostPath, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(hostPath, unix.MNT_DETACH)
	// The plugin: it holds the state directory's lock as long as it runs.
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	cfg := configs.Default()
	cfg.StateDir, cfg.MountTimeout = dir, 30*time.Second
	n := NewManagerNetwork(cfg, nil)
	start := time.Now()
	got, err := n.HostPath(context.Background(), spec, "ctr")
	if took := time.Since(start); took > time.Second {
		t.Errorf("the hook took %s to find a live mount", took)
	}
	if err != nil || got != hostPath {
		t.Errorf("HostPath = %q, %v; want %s", got, err, hostPath)
	}
}
