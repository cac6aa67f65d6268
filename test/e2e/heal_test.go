//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// healServer is the network filesystem server of a heal test.
type healServer struct {
	typ, source, opts string
	content           string
	daemon            func(comm string) bool // which processes of the mount's scope are the FUSE daemon
	down, up          func(t *testing.T)     // the server goes away, and comes back
}

// TestNetworkHeal: on real containerd + runc, for sshfs and GlusterFS, a container of an
// rslave class reads the mount in a loop; the FUSE daemon is killed with SIGKILL five times
// in a row; each time the reads fail for a while and then succeed again without a restart,
// within healBound; a new container works; the host holds one mount for the spec; an rprivate
// container keeps the dead mount (logged). Then the server goes down for a while and comes
// back: the reads recover. GlusterFS also goes through two containers sharing one host mount,
// a cgroup kill of the agent and the adoption of its mount.
func TestNetworkHeal(t *testing.T) {
	testenv.Require(t, "fuse", "root")
	t.Run("sshfs", func(t *testing.T) {
		testenv.Require(t, "sshfs", "/usr/sbin/sshd")
		work := harness.WorkDir(t, "mk-heal-")
		sshd, err := harness.StartSSHD(work)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sshd.Stop)
		content := "hello from sshfs\n"
		if err := os.WriteFile(filepath.Join(sshd.Export(), "hello"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		testHeal(t, work, healServer{
			typ: "fuse.sshfs", source: "root@127.0.0.1:" + sshd.Export(), content: content,
			opts:   strings.Join(append(sshd.ClientOptions(), "ConnectTimeout=3"), ","),
			daemon: func(comm string) bool { return comm != "ssh" },
			down:   func(t *testing.T) { sshd.Stop() },
			up: func(t *testing.T) {
				if err := sshd.Start(); err != nil {
					t.Fatal(err)
				}
			},
		})
	})
	t.Run("glusterfs", func(t *testing.T) {
		testenv.Require(t, harness.GlusterPrograms...)
		work := harness.WorkDir(t, "mk-heal-")
		g, err := harness.StartGluster(work)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Stop)
		content := "hello from glusterfs\n"
		if err := os.WriteFile(filepath.Join(g.Brick(), "hello"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		testHeal(t, work, healServer{
			typ: "glusterfs", source: g.Source(), content: content, opts: "log-file=" + g.ClientLog(),
			daemon: func(comm string) bool { return comm == "glusterfs" },
			down: func(t *testing.T) {
				// the brick daemon killed outright: glusterd does not restart it by itself
				for _, pid := range g.BrickPids() {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			},
			up: func(t *testing.T) {
				if err := g.StartVolume(); err != nil {
					t.Fatal(err)
				}
			},
		})
	})
}
