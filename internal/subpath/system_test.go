package subpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"

	"github.com/mountkeeper/mountkeeper/internal/subpath/subpathtest"

	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestSystemInNamespace checks System's answers against real mounts: statmount and the mountinfo
// fallback agree (deleted roots included), and a bind attached below a shared mount, which
// comes out shared, is made private.
func TestSystemInNamespace(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	k := subpathtest.NewKubelet(t) // its root is a shared bind mount of itself
	sec := k.Volume(subpathtest.Secret, "sec", true)
	ts := k.WriteAtomic(sec, map[string]subpathtest.Entry{"token": subpathtest.File("t1"), "dir/x": subpathtest.File("x1")})
	fileTarget := subpathtest.Bind(k, ParseTarget, sec, "sec", "app", 0, "token")
	dirTarget := subpathtest.Bind(k, ParseTarget, sec, "sec", "app", 1, "dir")
	k.WriteAtomic(sec, map[string]subpathtest.Entry{"token": subpathtest.File("t2"), "dir/x": subpathtest.File("x2")})

	open := func(p string) *Node {
		t.Helper()
		n, err := System{}.Open(nil, p, unix.OpenHow{Flags: unix.O_NOFOLLOW})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}

	t.Run("Mount", func(t *testing.T) {
		var kstat unix.Stat_t
		subpathtest.Must(t, unix.Stat(k.Root, &kstat))
		// k.Root is a bind of itself: its root is its path within the filesystem below it,
		// which is not its path where the temporary directory is a mount of its own (a
		// tmpfs /tmp, as in the kernel matrix's guests).
		below, err := mounttable.MountinfoOf(open(filepath.Dir(k.Root)).fd)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(below.Point, k.Root)
		if err != nil {
			t.Fatal(err)
		}
		kRoot := filepath.Join(below.Root, rel)
		tests := []struct {
			path, root, point string
			shared            bool
		}{
			{path: fileTarget.Path, root: "/" + ts + "/token//deleted", point: fileTarget.Path, shared: true},
			{path: dirTarget.Path, root: "/" + ts + "/dir//deleted", point: dirTarget.Path, shared: true},
			{path: sec, root: "/", point: sec, shared: true},
			{path: filepath.Join(k.Pod(), "volumes"), root: kRoot, point: k.Root, shared: true},
		}
		for _, tt := range tests {
			n := open(tt.path)
			if !n.UniqueMountID {
				t.Log("the kernel has no unique mount IDs (Linux < 6.8): only the mountinfo fallback is checked")
			}
			got, err := System{}.Mount(n)
			if err != nil {
				t.Fatalf("Mount(%s): %v", tt.path, err)
			}
			if got.Root != tt.root || got.Point != tt.point || got.Shared != tt.shared || got.Slave {
				t.Errorf("Mount(%s) = %+v; want root %s, point %s, shared %v", tt.path, got, tt.root, tt.point, tt.shared)
			}
			fallback, err := mounttable.MountinfoOf(n.fd)
			if err != nil {
				t.Fatalf("MountinfoOf(%s): %v", tt.path, err)
			}
			fallback.ID = got.ID // mountinfo has the reusable ID, statmount the unique one
			if fallback != got {
				t.Errorf("%s: statmount says %+v, mountinfo says %+v", tt.path, got, fallback)
			}
		}
		if got, err := (System{}).Mount(open(sec)); err != nil || got.Major != unix.Major(open(sec).Dev) || got.Minor != unix.Minor(open(sec).Dev) {
			t.Errorf("Mount(%s) device %d:%d (%v), want the tmpfs' %d:%d", sec, got.Major, got.Minor, err, unix.Major(open(sec).Dev), unix.Minor(open(sec).Dev))
		}
	})

	t.Run("Stat", func(t *testing.T) {
		for _, tt := range []struct {
			path              string
			nlink0, mountRoot bool
			dir               bool
		}{
			{path: fileTarget.Path, nlink0: true, mountRoot: true},
			{path: dirTarget.Path, nlink0: true, mountRoot: true, dir: true},
			{path: filepath.Join(sec, "..data"), nlink0: false},
		} {
			i, err := System{}.Stat(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if (i.Nlink == 0) != tt.nlink0 || i.MountRoot != tt.mountRoot || !i.MountRootKnown || i.IsDir() != tt.dir {
				t.Errorf("Stat(%s) = %+v; want nlink 0 %v, mount root %v, dir %v", tt.path, i, tt.nlink0, tt.mountRoot, tt.dir)
			}
		}
		if _, err := (System{}).Stat(filepath.Join(sec, "missing")); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
			t.Errorf("Stat of a missing path: %v", err)
		}
	})

	t.Run("Attach propagates as a bind does; MakePrivate", func(t *testing.T) {
		src := filepath.Join(k.Root, "src")
		subpathtest.Must(t, os.WriteFile(src, []byte("s"), 0o644))
		plain, viaAttach := filepath.Join(k.Root, "plain"), filepath.Join(k.Root, "attached")
		for _, p := range []string{plain, viaAttach} {
			subpathtest.Must(t, os.WriteFile(p, nil, 0o644))
		}
		root, err := System{}.Mount(open(k.Root))
		subpathtest.Must(t, err)
		// A bind with mount(2) of a file on the shared kubelet root: a peer of the root.
		subpathtest.Must(t, unix.Mount(src, plain, "", unix.MS_BIND, ""))
		if m, err := (System{}).Mount(open(plain)); err != nil || !m.Shared {
			t.Fatalf("a plain bind below the shared root is %s (%v); this test expects shared", m.Propagation(), err)
		}
		tree, err := System{}.Clone(open(src))
		subpathtest.Must(t, err)
		defer tree.Close()
		m, err := System{}.Attach(tree, open(viaAttach), false)
		subpathtest.Must(t, err)
		if !m.Shared || m.Point != viaAttach || m.Root != filepath.Join(root.Root, "src") {
			t.Errorf("Attach = %+v (%s), want a shared mount of %s on %s, as mount(2) makes", m, m.Propagation(), src, viaAttach)
		}
		if b, _ := os.ReadFile(viaAttach); string(b) != "s" {
			t.Errorf("%s reads %q after Attach, want s", viaAttach, b)
		}
		subpathtest.Must(t, System{}.MakePrivate(tree))
		if got := propagation(t, viaAttach); got != "private" {
			t.Errorf("after MakePrivate the bind on %s is %s", viaAttach, got)
		}
		if got := propagation(t, k.Root); got != "shared" {
			t.Errorf("MakePrivate of a bind changed the kubelet root to %s", got)
		}
	})

	t.Run("Path and Names", func(t *testing.T) {
		n := open(filepath.Join(sec, "..data"))
		if p, err := (System{}).Path(n); err != nil || p != filepath.Join(sec, "..data") {
			t.Errorf("Path(..data opened O_NOFOLLOW) = %q, %v", p, err)
		}
		d, err := System{}.Open(nil, sec, unix.OpenHow{Flags: unix.O_DIRECTORY})
		subpathtest.Must(t, err)
		defer d.Close()
		names, err := System{}.Names(d)
		subpathtest.Must(t, err)
		if got := strings.Join(slices.Sorted(slices.Values(names)), " "); !strings.Contains(got, "..data") || !strings.Contains(got, "token") {
			t.Errorf("Names(%s) = %s", sec, got)
		}
	})

	t.Run("Detach refuses a node that is no mount root", func(t *testing.T) {
		if err := (System{}).Detach(open(filepath.Join(sec, "token"))); err == nil || !strings.Contains(err.Error(), "not the root of a mount") {
			t.Errorf("Detach of a plain file: %v", err)
		}
	})
}
