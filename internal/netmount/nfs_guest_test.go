//go:build guestnfs

package netmount

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// These tests mount NFS for real through the Manager, mount(8) and mount.nfs. They need a
// kernel nfsd serving 127.0.0.1:/export and no NFS client installed when they begin: the
// guest of test/vm's TestNFS (nfs.go there) sets that up and runs them; the host never
// compiles them (build tag guestnfs).

// guestNFSEnv is set by the guest once its nfsd serves /export; its value is the directory
// holding the unpacked client (usr/sbin/mount.nfs and what it runs).
const guestNFSEnv = "MOUNTKEEPER_GUEST_NFS_ROOT"

// nfsClientFiles are what installing nfs-common puts where mount(8) and mount.nfs look.
var nfsClientFiles = []string{"mount.nfs", "mount.nfs4", "umount.nfs", "umount.nfs4", "start-statd", "rpc.statd", "sm-notify"}

const nfsContent = "served by the guest's nfsd\n"

func guestNFS(t *testing.T) (clientRoot string) {
	t.Helper()
	root := os.Getenv(guestNFSEnv)
	if root == "" {
		t.Fatalf("%s is not set: these tests run in test/vm's NFS guest only", guestNFSEnv)
	}
	return root
}

// installNFSClient copies the client into /usr/sbin, as installing nfs-common would; the
// guest's root is a throwaway overlay.
func installNFSClient(t *testing.T, root string) {
	t.Helper()
	for _, f := range nfsClientFiles {
		src := filepath.Join(root, "usr", "sbin", f)
		dst := filepath.Join("/usr/sbin", f)
		if target, err := os.Readlink(src); err == nil {
			os.Remove(dst)
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
		if err != nil {
			in.Close()
			t.Fatal(err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// nfsManager is a Manager with its mount scopes under a cgroup of the test's own, removed
// (and checked empty) at the end.
func nfsManager(t *testing.T, grace time.Duration, wanted ...netspec.Spec) (*Manager, *CgroupScoper, string) {
	t.Helper()
	root, err := liveCgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	sc := &CgroupScoper{Root: root, Parent: "mountkeeper-nfs-test.slice"}
	if err := os.MkdirAll(filepath.Join(root, sc.Parent), 0o755); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	m, err := NewManager(Config{StateDir: stateDir, Grace: grace, MountTimeout: 60 * time.Second,
		RetryBackoff: 200 * time.Millisecond, FirstWait: 100 * time.Millisecond,
		Scoper: sc, Log: testLogger(t), Wanted: wanted})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		if err := emergencyCleanup(filepath.Join(root, sc.Parent), stateDir); err != nil {
			t.Error(err)
		}
	})
	return m, sc, stateDir
}

// scopesLeft lists the mount scopes (cgroups) below sc's parent.
func scopesLeft(t *testing.T, sc *CgroupScoper) []string {
	t.Helper()
	units, err := sc.Units()
	if err != nil {
		t.Fatal(err)
	}
	return units
}

// TestNFSGuestNoClient: a node without mount.nfs refuses an NFS mount naming the packages;
// once the client is installed (no restart), the next claim mounts. It runs first: the
// other tests need the client.
func TestNFSGuestNoClient(t *testing.T) {
	root := guestNFS(t)
	if _, err := os.Stat("/usr/sbin/mount.nfs"); err == nil {
		t.Fatal("/usr/sbin/mount.nfs exists before the test installed it")
	}
	spec := netspec.Spec{Type: "nfs", Source: "127.0.0.1:/", Options: []string{"vers=4.2"}}
	m, sc, _ := nfsManager(t, 200*time.Millisecond, spec)
	start := time.Now()
	_, err := acquireEventually(t, m, 10*time.Second, spec, "ctr-a")
	var pe *PreflightError
	if err == nil || !errors.As(err, &pe) && !strings.Contains(err.Error(), "nfs-common") {
		t.Fatalf("Acquire without mount.nfs = %v; want a refusal naming nfs-common", err)
	}
	for _, want := range []string{"mount.nfs", "nfs-common", "nfs-utils"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %s", err, want)
		}
	}
	t.Logf("refused in %s: %v", time.Since(start).Round(time.Millisecond), err)

	installNFSClient(t, root)
	start = time.Now()
	path, err := acquireEventually(t, m, 60*time.Second, spec, "ctr-a")
	if err != nil {
		t.Fatalf("Acquire after the client was installed: %v", err)
	}
	t.Logf("mounted %s after the client was installed, in %s", spec, time.Since(start).Round(time.Millisecond))
	if got := readBounded(t, filepath.Join(path, "hello")); got != nfsContent {
		t.Errorf("read %q, want %q", got, nfsContent)
	}
	m.Release("ctr-a")
	waitGone(t, m, sc, path, 30*time.Second)
}

// waitGone waits until nothing is mounted at path and no scope is left below sc's parent.
func waitGone(t *testing.T, m *Manager, sc *CgroupScoper, path string, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		mounted := len(mountsAt(t, path)) > 0
		scopes := scopesLeft(t, sc)
		if !mounted && len(scopes) == 0 {
			t.Logf("released: nothing mounted at %s, no scope left, %s after the last release",
				path, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s after the last release: mounted at %s: %v, scopes left: %v", timeout, path, mounted, scopes)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestNFSGuestShared: for NFSv4.2 and NFSv3, two claims share one host mount; after the last
// release and the grace period nothing is mounted and no scope is left.
func TestNFSGuestShared(t *testing.T) {
	guestNFS(t)
	if _, err := os.Stat("/usr/sbin/mount.nfs"); err != nil {
		t.Fatalf("no NFS client (TestNFSGuestNoClient installs it): %v", err)
	}
	for _, c := range []struct {
		name string
		spec netspec.Spec
	}{
		{"v4.2", netspec.Spec{Type: "nfs", Source: "127.0.0.1:/", Options: []string{"vers=4.2"}}},
		{"v3", netspec.Spec{Type: "nfs", Source: "127.0.0.1:/export", Options: []string{"vers=3"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const grace = 500 * time.Millisecond
			m, sc, _ := nfsManager(t, grace, c.spec)
			m.Ensure(c.spec)
			start := time.Now()
			path, err := acquireEventually(t, m, 60*time.Second, c.spec, "ctr-a")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("mounted %s in %s", c.spec, time.Since(start).Round(time.Millisecond))
			p2, err := acquire(t, m, 5*time.Second, c.spec, "ctr-b")
			if err != nil || p2 != path {
				t.Fatalf("second claim = %s, %v; want %s", p2, err, path)
			}
			mi := mountsAt(t, path)
			if len(mi) != 1 || !strings.HasPrefix(mi[0].FSType, "nfs") {
				t.Fatalf("mountinfo at %s: %+v; want one nfs mount", path, mi)
			}
			if got := readBounded(t, filepath.Join(path, "hello")); got != nfsContent {
				t.Errorf("read %q, want %q", got, nfsContent)
			}
			m.Release("ctr-a")
			time.Sleep(2 * grace)
			if len(mountsAt(t, path)) != 1 {
				t.Fatalf("released with a claim left: %s is no longer mounted", path)
			}
			m.Release("ctr-b")
			waitGone(t, m, sc, path, 30*time.Second)
		})
	}
}
