package hostmount

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/specmod"

	"github.com/mountkeeper/mountkeeper/test/privatens"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// blockingInspector never answers until release is closed.
type blockingInspector struct{ release chan struct{} }

func (b blockingInspector) Stat(string) (fs.FileInfo, error) {
	<-b.release
	return nil, nil
}

func (b blockingInspector) MountPoints(paths []string) ([]MountPoint, error) {
	<-b.release
	return make([]MountPoint, len(paths)), nil
}

func TestCheckerTimesOut(t *testing.T) {
	in := blockingInspector{release: make(chan struct{})}
	defer close(in.release) // let the abandoned check finish
	c := NewChecker(in).WithTimeout(10 * time.Millisecond)
	err := c.CheckSources([]specmod.Mount{
		{Source: "/nfs/dead/a", Destination: "/a", Propagation: specmod.Private},
		{Source: "/nfs/dead/b", Destination: "/b", Propagation: specmod.Slave},
	})
	want := "check the host side of /nfs/dead/a, /nfs/dead/b: no answer within 10ms (is a network filesystem on the path dead?)"
	if err == nil || err.Error() != want {
		t.Errorf("CheckSources on a host that never answers\ngot:  %v\nwant: %s", err, want)
	}
}

// TestCheckerBoundsStuckChecks: with a source below a filesystem that never answers, 1,000
// checks leave one goroutine behind (for a real dead FUSE mount: one OS thread), not 1,000;
// every check after the first stuck one fails at once with the same message.
func TestCheckerBoundsStuckChecks(t *testing.T) {
	in := blockingInspector{release: make(chan struct{})}
	defer close(in.release)
	c := NewChecker(in).WithTimeout(5 * time.Millisecond)
	mounts := []specmod.Mount{{Source: "/fuse/dead/x", Destination: "/x", Propagation: specmod.Private}}
	before := runtime.NumGoroutine()
	start := time.Now()
	for i := range 1000 {
		err := c.CheckSources(mounts)
		if want := "check the host side of /fuse/dead/x: no answer within 5ms"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("check %d: %v, want %q", i, err, want)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("1000 checks of a stuck source took %s: only the first should wait", took)
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Errorf("goroutines grew from %d to %d over 1000 checks of a stuck source", before, after)
	}
	// Another source is still checked.
	other := blockingInspector{release: make(chan struct{})}
	close(other.release)
	if err := NewChecker(other).WithTimeout(time.Second).CheckSources([]specmod.Mount{{Source: "/srv/ok", Destination: "/ok", Propagation: specmod.Private}}); err != nil {
		t.Errorf("a check of another source: %v", err)
	}
}

func TestSystemStat(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		wantDir bool
		wantErr error // nil: must succeed
	}{
		{name: "directory", path: dir, wantDir: true},
		{name: "file", path: file},
		{name: "missing", path: filepath.Join(dir, "missing"), wantErr: fs.ErrNotExist},
		{name: "below a file", path: filepath.Join(file, "x"), wantErr: syscall.ENOTDIR},
		// A class source is never resolved through a symlink: a container that can write
		// the parent of another class's source could point it at the host's /etc.
		{name: "symlink", path: filepath.Join(dir, "link-to-dir"), wantErr: syscall.ELOOP},
		{name: "through a symlinked directory", path: filepath.Join(dir, "link-to-dir", "file"), wantErr: syscall.ELOOP},
		{name: "magic link", path: "/proc/self/root" + dir, wantErr: syscall.ELOOP},
	}
	if err := os.Symlink(dir, filepath.Join(dir, "link-to-dir")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fi, err := System{}.Stat(tt.path)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("Stat(%s) error = %v, want %v", tt.path, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Stat(%s): %v", tt.path, err)
			}
			if fi.IsDir() != tt.wantDir {
				t.Errorf("Stat(%s).IsDir() = %v, want %v", tt.path, fi.IsDir(), tt.wantDir)
			}
		})
	}
}

// TestSystemMountPointsHere needs no privilege: the mount holding a temporary directory is one
// of its ancestors (or itself), and every path maps to one mount point, in order.
func TestSystemMountPointsHere(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{dir, "/", dir}
	mps, err := System{}.MountPoints(paths)
	if err != nil {
		t.Fatalf("MountPoints(%q): %v", paths, err)
	}
	if len(mps) != len(paths) {
		t.Fatalf("MountPoints(%q) returned %d mount points, want %d", paths, len(mps), len(paths))
	}
	if !within(dir, mps[0].Path) {
		t.Errorf("mount point of %s is %s, which does not hold it", dir, mps[0].Path)
	}
	if mps[1].Path != "/" {
		t.Errorf("mount point of / is %s, want /", mps[1].Path)
	}
	if mps[0] != mps[2] {
		t.Errorf("the same path got two mount points: %+v and %+v", mps[0], mps[2])
	}

	sameAsMountinfo(t, paths, mps)

	_, err = System{}.MountPoints([]string{dir, filepath.Join(dir, "missing")})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, "missing")) {
		t.Errorf("MountPoints of a missing path: error = %v, want fs.ErrNotExist naming the path", err)
	}
}

// sameAsMountinfo checks mps, as MountPoints found them (with statmount(2) where the kernel has
// it), against the mountinfo fallback, which must agree mount for mount.
func sameAsMountinfo(t *testing.T, paths []string, mps []MountPoint) {
	t.Helper()
	fromMountinfo := make([]MountPoint, len(paths))
	for i, p := range paths {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mounttable.MountinfoOf(fd)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("MountinfoOf(%s): %v", p, err)
		}
		fromMountinfo[i] = MountPoint{ID: m.MountinfoID, Path: m.Point, Shared: m.Shared, Slave: m.Slave}
	}
	if len(mps) != len(paths) || len(fromMountinfo) != len(paths) {
		t.Fatalf("%d paths, but MountPoints gave %d mount points and mountinfo %d", len(paths), len(mps), len(fromMountinfo))
	}
	for i := range paths {
		got := mps[i]
		got.UniqueID = 0 // mountinfo has no unique IDs
		if got != fromMountinfo[i] {
			t.Errorf("mount point of %s: MountPoints says %+v, mountinfo says %+v", paths[i], mps[i], fromMountinfo[i])
		}
	}
}

func within(p, dir string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// TestSystemInNamespace checks System against real mounts. It mounts, so it re-runs itself in a
// private mount namespace (unshare -m --propagation private) and needs root; the mounts vanish
// with that namespace whatever happens.
func TestSystemInNamespace(t *testing.T) {
	if !privatens.Run(t) {
		return
	}

	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mkdir := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	priv, shr, slv, both, stacked := mkdir("private"), mkdir("shared"), mkdir("slave"), mkdir("shared-slave"), mkdir("stacked")

	// private: a tmpfs as it comes in a private namespace.
	mount(t, "-t", "tmpfs", "mk-private", priv)
	privSub := mkdir("private/sub")
	// shared: a tmpfs made shared.
	mount(t, "-t", "tmpfs", "mk-shared", shr)
	testsupport.Run(t, "mount", "--make-shared", shr)
	// slave: a bind of the shared one, made a slave of it.
	mount(t, "--bind", shr, slv)
	testsupport.Run(t, "mount", "--make-slave", slv)
	// shared and slave: a slave that is also shared ("shared:N master:M").
	mount(t, "--bind", shr, both)
	testsupport.Run(t, "mount", "--make-slave", both)
	testsupport.Run(t, "mount", "--make-shared", both)
	// stacked: a private tmpfs over a shared one; the top one counts.
	mount(t, "-t", "tmpfs", "mk-lower", stacked)
	testsupport.Run(t, "mount", "--make-shared", stacked)
	lower, err := System{}.MountPoints([]string{stacked})
	if err != nil {
		t.Fatalf("MountPoints(%s): %v", stacked, err)
	}
	mount(t, "-t", "tmpfs", "mk-upper", stacked)
	testsupport.Run(t, "mount", "--make-private", stacked)

	t.Run("MountPoints", func(t *testing.T) {
		tests := []struct {
			path   string
			want   string // mount point path
			shared bool
			slave  bool
		}{
			{path: priv, want: priv},
			{path: privSub, want: priv},
			{path: shr, want: shr, shared: true},
			{path: slv, want: slv, slave: true},
			{path: both, want: both, shared: true, slave: true},
			{path: stacked, want: stacked},
		}
		paths := make([]string, len(tests))
		for i, tt := range tests {
			paths[i] = tt.path
		}
		mps, err := System{}.MountPoints(paths)
		if err != nil {
			t.Fatalf("MountPoints(%q): %v", paths, err)
		}
		if len(mps) != len(tests) {
			t.Fatalf("MountPoints returned %d mount points for %d paths", len(mps), len(tests))
		}
		for i, tt := range tests {
			got := mps[i]
			if got.Path != tt.want || got.Shared != tt.shared || got.Slave != tt.slave {
				t.Errorf("mount point of %s = %s (%s), want %s (%s)", tt.path, got.Path, got.Propagation(),
					tt.want, MountPoint{Shared: tt.shared, Slave: tt.slave}.Propagation())
			}
		}
		if mps[0].ID != mps[1].ID {
			t.Errorf("%s and its subdirectory got different mounts: %d and %d", priv, mps[0].ID, mps[1].ID)
		}
		sameAsMountinfo(t, paths, mps)
		if mps[5].ID == lower[0].ID || !lower[0].Shared {
			t.Errorf("stacked mounts: got mount %d (%s) for %s, want the private top mount, not the shared lower one %d (%s)",
				mps[5].ID, mps[5].Propagation(), stacked, lower[0].ID, lower[0].Propagation())
		}
	})

	t.Run("Stat", func(t *testing.T) {
		missing := filepath.Join(shr, "missing")
		if _, err := (System{}).Stat(missing); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat(%s) error = %v, want fs.ErrNotExist", missing, err)
		}
		if fi, err := (System{}).Stat(privSub); err != nil || !fi.IsDir() {
			t.Errorf("Stat(%s) = %v, %v; want a directory", privSub, fi, err)
		}
	})

	t.Run("Stat through a symlink names the component", func(t *testing.T) {
		// /srv/shared -> /shared rw and /srv/shared/cfg -> /cfg ro: a container replaced
		// /shared/cfg with a symlink to /etc.
		if err := os.Symlink("/etc", filepath.Join(shr, "cfg")); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{filepath.Join(shr, "cfg"), filepath.Join(shr, "cfg", "ssh")} {
			_, err := System{}.Stat(p)
			want := "component " + filepath.Join(shr, "cfg") + ` is a symlink (to "/etc")`
			var se *SymlinkError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), want) {
				t.Errorf("Stat(%s) = %v, want a *SymlinkError containing %q", p, err, want)
			}
		}
		err := NewChecker(System{}).CheckSources([]specmod.Mount{{Source: filepath.Join(shr, "cfg"), Destination: "/cfg", Propagation: specmod.Slave, ReadOnly: true}})
		want := "mount " + shr + "/cfg -> /cfg (rslave, ro): source " + shr + "/cfg: component " + shr + `/cfg is a symlink (to "/etc"): mountkeeper does not follow symlinks in a source`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckSources through a symlink\ngot:  %v\nwant it to contain: %s", err, want)
		}
	})

	t.Run("Checker", func(t *testing.T) {
		tests := []struct {
			name string
			src  string
			p    specmod.Propagation
			want string // error substring; "" means no error
		}{
			{name: "rprivate from private", src: privSub, p: specmod.Private},
			{name: "rslave from private", src: privSub, p: specmod.Slave,
				want: `host mount point ` + priv + ` holding the source is private, but rslave (HostToContainer) needs it shared or slave: run "mount --make-rshared ` + priv + `"`},
			{name: "rslave from shared", src: shr, p: specmod.Slave},
			{name: "rslave from slave", src: slv, p: specmod.Slave},
			{name: "rshared from slave", src: slv, p: specmod.Shared,
				want: `host mount point ` + slv + ` holding the source is slave, but rshared (Bidirectional) needs it shared: run "mount --make-rshared ` + slv + `"`},
			{name: "rshared from shared", src: shr, p: specmod.Shared},
			{name: "rshared from shared and slave", src: both, p: specmod.Shared},
			{name: "rslave from a private mount stacked on a shared one", src: stacked, p: specmod.Slave,
				want: `host mount point ` + stacked + ` holding the source is private`},
			{name: "missing source", src: filepath.Join(shr, "missing"), p: specmod.Shared,
				want: "source " + filepath.Join(shr, "missing") + " does not exist on the host: create it"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := NewChecker(System{}).CheckSources([]specmod.Mount{{Source: tt.src, Destination: "/c", Propagation: tt.p}})
				if tt.want == "" {
					if err != nil {
						t.Errorf("CheckSources: %v", err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("CheckSources error\ngot:  %v\nwant it to contain: %s", err, tt.want)
				}
			})
		}
	})
}

// mount runs mount(8) with args, the last being the target, and unmounts the target when the
// test ends.
func mount(t *testing.T, args ...string) {
	t.Helper()
	testsupport.Run(t, "mount", args...)
	target := args[len(args)-1]
	t.Cleanup(func() {
		if out, err := exec.Command("umount", target).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", target, err, out)
		}
	})
}
