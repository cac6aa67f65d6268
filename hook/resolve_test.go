package hook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// hostileRoot builds a rootfs whose image holds the symlinks an attacker (or a careless
// image) would plant, next to an "outside" directory that must never be touched.
func hostileRoot(t *testing.T) (root *os.File, rootDir, outside string) {
	t.Helper()
	base := t.TempDir()
	rootDir = filepath.Join(base, "bundle", "rootfs")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{rootDir + "/etc", rootDir + "/real/sub", rootDir + "/a", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"data":     outside,          // absolute, like /data -> /etc
		"etclink":  "/etc",           // absolute, even though /etc exists in the image
		"up":       "../../outside",  // relative, climbing out of the rootfs
		"a/deep":   "../../../../..", // relative, climbing far out
		"loop1":    "loop2",
		"loop2":    "loop1",
		"self":     "self",
		"dangling": "nowhere/at/all",
		"rel":      "real/sub", // relative and inside: followed
		"dot":      ".",        // the root itself
		"magic":    "proc/self/root",
		"procsys":  "proc/sys",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(rootDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootDir, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenFile(rootDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root, rootDir, outside
}

// mountProc puts a procfs at rootDir/proc, as runc has done when a prestart hook runs, or
// skips the test when it cannot mount.
func mountProc(t *testing.T, rootDir string) {
	t.Helper()
	p := filepath.Join(rootDir, "proc")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("proc", p, "proc", 0, ""); err != nil {
		testenv.Skip(t, "mount proc at %s: %v (needs root)", p, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", p, err)
		}
	})
}

func TestResolveDestinationRefusesHostileTrees(t *testing.T) {
	root, rootDir, outside := hostileRoot(t)
	withProc := os.Geteuid() == 0
	if withProc {
		mountProc(t, rootDir)
	}
	tests := []struct {
		name, dst string
		dir       bool
		err       string
		proc      bool // needs the procfs mount
	}{
		{name: "absolute symlink out", dst: "/data", dir: true,
			err: `destination /data: /data is a symlink to "` + outside + `", which leads out of the container's rootfs`},
		{name: "absolute symlink out, below it", dst: "/data/x/y", dir: true,
			err: `destination /data/x/y: /data is a symlink to "` + outside + `", which leads out of the container's rootfs`},
		{name: "absolute symlink to a path the image has", dst: "/etclink/x", dir: true,
			err: `/etclink is a symlink to "/etc", which leads out of the container's rootfs`},
		{name: "relative symlink climbing out", dst: "/up/x", dir: false,
			err: `/up is a symlink to "../../outside", which leads out of the container's rootfs`},
		{name: "deep relative symlink climbing out", dst: "/a/deep/etc", dir: true,
			err: `/a/deep is a symlink to "../../../../..", which leads out`},
		{name: "dot-dot in the destination", dst: "/../outside/x", dir: true,
			err: `destination /../outside/x: /.. leads out of the container's rootfs`},
		{name: "symlink loop", dst: "/loop1/x", dir: true,
			err: `/loop1 is a symlink to "loop2", which loops (too many levels of symbolic links)`},
		{name: "self loop", dst: "/self", dir: true,
			err: `/self is a symlink to "self", which loops`},
		{name: "dangling symlink", dst: "/dangling", dir: true,
			err: `/dangling is a symlink to "nowhere/at/all", which does not exist in the container: mountkeeper does not create a symlink's target`},
		{name: "dangling symlink as a parent", dst: "/dangling/x", dir: false,
			err: `/dangling is a symlink to "nowhere/at/all", which does not exist`},
		{name: "file as a parent", dst: "/file/x", dir: true, err: `destination /file/x: /file is not a directory in the container`},
		{name: "magic link through /proc", dst: "/magic/etc", dir: true, proc: true,
			err: `destination /magic/etc: /magic leads through a /proc magic link (like /proc/self/root)`},
		{name: "magic link named directly", dst: "/proc/self/root/etc", dir: true, proc: true,
			err: `/proc/self/root leads through a /proc magic link`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.proc && !withProc {
				testenv.Skip(t, "needs root to mount proc")
			}
			var undo undoLog
			f, err := resolveDestination(root, tt.dst, tt.dir, &undo)
			if err == nil {
				f.Close()
				t.Fatalf("resolveDestination(%s) succeeded", tt.dst)
			}
			if !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error\ngot:  %v\nwant: %s", err, tt.err)
			}
			if len(undo) != 0 {
				t.Errorf("%d steps recorded for a refused destination", len(undo))
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Errorf("something was created outside the rootfs: %v", entries)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(rootDir, "nowhere")); err == nil {
		t.Error("a dangling symlink's target was created")
	}
}

func TestResolveDestinationCreatesAndUndoes(t *testing.T) {
	root, rootDir, _ := hostileRoot(t)
	tests := []struct {
		name, dst string
		dir       bool
		created   []string // paths below rootDir that the resolver creates
		isDir     bool
	}{
		{name: "existing directory", dst: "/etc", dir: true, isDir: true},
		{name: "missing directories", dst: "/vol/a/b", dir: true, created: []string{"vol", "vol/a", "vol/a/b"}, isDir: true},
		{name: "missing file below a missing directory", dst: "/run2/secret", dir: false, created: []string{"run2", "run2/secret"}},
		{name: "relative symlink inside the rootfs is followed", dst: "/rel/x", dir: true, created: []string{"real/sub/x"}, isDir: true},
		{name: "below an existing directory", dst: "/a/new", dir: false, created: []string{"a/new"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var undo undoLog
			f, err := resolveDestination(root, tt.dst, tt.dir, &undo)
			if err != nil {
				t.Fatalf("resolveDestination(%s): %v", tt.dst, err)
			}
			defer f.Close()
			var st unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			if got := st.Mode&unix.S_IFMT == unix.S_IFDIR; got != tt.isDir {
				t.Errorf("resolved %s: directory = %v, want %v", tt.dst, got, tt.isDir)
			}
			if len(undo) != len(tt.created) {
				t.Errorf("%d undo steps, want %d", len(undo), len(tt.created))
			}
			for _, c := range tt.created {
				if _, err := os.Lstat(filepath.Join(rootDir, c)); err != nil {
					t.Errorf("%s was not created: %v", c, err)
				}
			}
			if err := undo.run(); err != nil {
				t.Fatalf("undo: %v", err)
			}
			for _, c := range tt.created {
				if _, err := os.Lstat(filepath.Join(rootDir, c)); err == nil {
					t.Errorf("%s is still there after undo", c)
				}
			}
		})
	}
}

func TestCheckMountPoint(t *testing.T) {
	root, rootDir, _ := hostileRoot(t)
	withProc := os.Geteuid() == 0
	if withProc {
		mountProc(t, rootDir)
	}
	tests := []struct {
		name, dst string
		dir       bool
		proc      bool
		err       string
	}{
		{name: "directory for a directory", dst: "/etc", dir: true},
		{name: "file for a file", dst: "/file", dir: false},
		{name: "file for a directory", dst: "/file", dir: true, err: "destination /file exists in the container and is not a directory, but the source is a directory"},
		{name: "directory for a file", dst: "/etc", dir: false, err: "destination /etc is a directory in the container, but the source is a file"},
		{name: "the root through a symlink", dst: "/dot", dir: true, err: "destination /dot resolves to the container's root (through a symlink in the image): refusing to mount over it"},
		{name: "into /proc through a symlink", dst: "/procsys", dir: true, proc: true, err: "destination /procsys resolves into the container's /proc or /sys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.proc && !withProc {
				testenv.Skip(t, "needs root to mount proc")
			}
			var undo undoLog
			f, err := resolveDestination(root, tt.dst, tt.dir, &undo)
			if err != nil {
				t.Fatalf("resolveDestination(%s): %v", tt.dst, err)
			}
			defer f.Close()
			err = checkMountPoint(root, f, tt.dst, tt.dir)
			if tt.err == "" {
				if err != nil {
					t.Fatalf("checkMountPoint: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("checkMountPoint error\ngot:  %v\nwant: %s", err, tt.err)
			}
		})
	}
}
