package testsupport

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// NFSExport is an export of its own of the kernel nfsd in test/vm's NFS guest: a tmpfs at a
// directory below the NFSv4 root /export (so that NFSv3 names the same directory), holding a
// file "hello", exported with a filesystem id that a failover changes. The root export and its
// content stay as the other tests need them.
type NFSExport struct {
	dir      string
	exportfs string // the unpacked server's exportfs
	exports  []byte // /etc/exports before the export was added
}

// NewNFSExport returns the export of dir, served by Serve; when tb ends, the export table is
// as it was and every filesystem Serve mounted at dir is unmounted.
func NewNFSExport(tb testing.TB, dir, exportfs string) *NFSExport {
	tb.Helper()
	exports, err := os.ReadFile("/etc/exports")
	if err != nil {
		tb.Fatal(err)
	}
	e := &NFSExport{dir: dir, exportfs: exportfs, exports: exports}
	tb.Cleanup(func() { e.remove(tb) })
	return e
}

// Serve mounts a new tmpfs holding content in its file "hello" at the export's directory, on
// top of what is there, and exports it with filesystem id fsid in one `exportfs -ra`, which
// drops any other id of the directory. Called again, it is a failover: another filesystem with
// other content and another id takes the export's place in one step. (With the export removed
// first, a heal that came between the steps mounted the bare directory below it, and read
// nothing there.)
func (e *NFSExport) Serve(tb testing.TB, content, fsid string) {
	tb.Helper()
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	Run(tb, "mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", e.dir)
	if err := os.WriteFile(filepath.Join(e.dir, "hello"), []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
	line := e.dir + " 127.0.0.1(rw,no_root_squash,fsid=" + fsid + ",no_subtree_check,insecure)\n"
	if err := os.WriteFile("/etc/exports", append(append([]byte{}, e.exports...), line...), 0o644); err != nil {
		tb.Fatal(err)
	}
	Run(tb, e.exportfs, "-ra")
	Run(tb, e.exportfs, "-f")
}

func (e *NFSExport) remove(tb testing.TB) {
	if err := os.WriteFile("/etc/exports", e.exports, 0o644); err != nil {
		tb.Error(err)
	}
	if out, err := exec.Command(e.exportfs, "-ra").CombinedOutput(); err != nil {
		tb.Errorf("exportfs -ra: %v: %s", err, out)
	}
	exec.Command(e.exportfs, "-f").Run()
	// The filesystems of every Serve are stacked at the directory (a test serves a few).
	for range 8 {
		if err := unix.Unmount(e.dir, 0); err != nil {
			if err := unix.Unmount(e.dir, unix.MNT_DETACH); err != nil {
				if !errors.Is(err, unix.EINVAL) {
					tb.Errorf("unmount %s: %v", e.dir, err)
				}
				break
			}
		}
	}
	os.Remove(e.dir)
}
