//go:build e2e

package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestLiveSubPathStaysReadOnly is a read-only reader in a real container (containerd and
// CRI-O, runc, NRI over the socket): the container of TestLiveSubPathRuntime, running as root
// and so the owner of the key (0:2000) and of the directory, mounts a configMap key and a
// configMap directory with subPath read-only, as kubelet does. After one update (the layer
// that brings it reached the container by propagation) every mount at both paths in the
// container is read-only, writing the key and creating a 1 MiB file in the directory both
// fail with EROFS, the container still reads the update, and the copy tmpfs does not grow.
func TestLiveSubPathStaysReadOnly(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, kind harness.RuntimeKind) {
		s := startLiveSubPath(t, kind, false)
		s.write(2)
		s.waitRead(2)
		tmpfs := filepath.Join(s.n.src(), "state", "subpath")
		used := func() int64 {
			var st unix.Statfs_t
			if err := unix.Statfs(tmpfs, &st); err != nil {
				t.Fatal(err)
			}
			return int64(st.Blocks-st.Bfree) * st.Bsize
		}
		before := used()

		for _, p := range []string{"/etc/app.conf", "/etc/conf.d"} {
			// The fifth field of a mountinfo line is the mount point, the sixth its own flags.
			out, _ := s.n.sh(s.id, "awk '$5 == \""+p+"\" {print $6}' /proc/self/mountinfo")
			flags := strings.Fields(out)
			if len(flags) < 2 {
				t.Errorf("mounts at %s in the container: %q, want its bind and a layer", p, out)
			}
			for i, f := range flags {
				if !strings.HasPrefix(f, "ro") {
					t.Errorf("mount %d of %d at %s in the container is %s after an update, want ro", i+1, len(flags), p, f)
				}
			}
		}
		if out, _ := s.n.sh(s.id, "id -u; stat -c %u /etc/app.conf /etc/conf.d"); !slices.Equal(strings.Fields(out), []string{"0", "0", "0"}) {
			t.Fatalf("the container does not run as the owner of the key and the directory (uid, owners): %q", out)
		}
		for _, w := range []struct{ what, script string }{
			{"write the key", "echo tampered >> /etc/app.conf 2>&1"},
			{"create a 1 MiB file in the directory", "head -c 1048576 /dev/zero > /etc/conf.d/big 2>&1"},
		} {
			out, code := s.n.sh(s.id, "{ "+w.script+"; } 2>&1")
			if code == 0 || !strings.Contains(out, "Read-only file system") {
				t.Errorf("%s in the container: exit %d, %q; want it refused with EROFS (Read-only file system)", w.what, code, out)
			}
		}
		if out, _ := s.n.sh(s.id, liveRead); out != liveWant(2) {
			t.Errorf("after the writes the container reads %q, want %q", out, liveWant(2))
		}
		if after := used(); after > before {
			t.Errorf("the copy tmpfs grew from %d to %d bytes through the container's read-only subPaths", before, after)
		}
		s.remove()
	})
}
