//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

const propagationConfig = `
runtimeClasses:
  mk-e2e:
    mounts:
      - {source: SRC/host/private, destination: /vol/private, propagation: None}
      - {source: SRC/host/slave, destination: /vol/slave, propagation: HostToContainer}
      - {source: SRC/host/shared, destination: /vol/shared, propagation: Bidirectional}
  mk-bad:
    mounts:
      - {source: SRC/private, destination: /vol/shared, propagation: Bidirectional}
`

// TestPropagation proves the three propagations on a real container: a mount made on the host
// after the container started shows through rslave and rshared only; a mount made in the
// container shows on the host through rshared only; an rshared mount from a private source
// fails creation with mountkeeper's own error; after a containerd restart the plugin serves
// the next container.
func TestPropagation(t *testing.T) {
	n := newNode(t, []string{"mk-e2e", "mk-bad"}, propagationConfig)
	host := n.sourceTmpfs("host", "shared")
	for _, d := range []string{"private", "slave", "shared"} {
		if err := os.Mkdir(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.sourceTmpfs("private", "private")

	id, err := n.runContainer("mk-e2e", "app")
	if err != nil {
		t.Fatalf("create container of class mk-e2e: %v", err)
	}

	// Tags are compared with the host source's peer group: an rshared mount anywhere in the
	// container makes the runtime share the whole rootfs, so every container mount is
	// "shared:" in a group of its own; what matters is the relation to the host's group.
	t.Run("container mounts relate to the host's peer group as asked", func(t *testing.T) {
		group := peerGroup(t, host)
		out, _ := n.sh(id, "cat /proc/self/mountinfo")
		want := map[string]struct{ peer, slave bool }{
			"/vol/private": {false, false},
			"/vol/slave":   {false, true},
			"/vol/shared":  {true, false},
		}
		for dst, w := range want {
			line := mountinfoLine(out, dst)
			if line == "" {
				t.Errorf("%s is not mounted in the container; mountinfo:\n%s", dst, out)
				continue
			}
			fields, _, _ := strings.Cut(line, " - ")
			peer := slices.Contains(strings.Fields(fields), "shared:"+group)
			slave := slices.Contains(strings.Fields(fields), "master:"+group)
			if peer != w.peer || slave != w.slave {
				t.Errorf("%s: peer of host group %s = %v, slave of it = %v; want %v, %v\n%s", dst, group, peer, slave, w.peer, w.slave, line)
			}
		}
	})

	t.Run("mounts propagate for real as asked", func(t *testing.T) {
		want := map[string]harness.Seen{
			"private": {HostToContainer: false, ContainerToHost: false},
			"slave":   {HostToContainer: true, ContainerToHost: false},
			"shared":  {HostToContainer: true, ContainerToHost: true},
		}
		for d, w := range want {
			got, err := harness.ProbePropagation(n.ctx, n.ctrd.CRI(), id, filepath.Join(host, d), "/vol/"+d)
			if err != nil {
				t.Fatalf("probe /vol/%s: %v", d, err)
			}
			if got != w {
				t.Errorf("/vol/%s: saw %+v, want %+v", d, got, w)
			}
		}
	})

	t.Run("rshared from a private source fails with the plugin's error", func(t *testing.T) {
		_, err := n.runContainer("mk-bad", "bad")
		if err == nil {
			t.Fatal("container of class mk-bad was created")
		}
		for _, want := range []string{"mountkeeper", `runtime class "mk-bad"`, n.src() + "/private -> /vol/shared (rshared)",
			"is private", "mount --make-rshared " + n.src() + "/private"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
	})

	t.Run("pods of other handlers get nothing", func(t *testing.T) {
		other, err := n.runContainer("", "plain")
		if err != nil {
			t.Fatalf("create container on the default handler: %v", err)
		}
		if out, _ := n.sh(other, "cat /proc/self/mountinfo"); strings.Contains(out, "/vol/") {
			t.Errorf("default-handler container has class mounts:\n%s", out)
		}
	})

	t.Run("after a containerd restart the plugin serves the next container", func(t *testing.T) {
		if err := n.ctrd.Restart(n.ctx); err != nil {
			t.Fatalf("restart containerd: %v", err)
		}
		// The plugin logs "connected to" on every (re)registration: wait for the second.
		if err := n.plugin.WaitLog(n.ctx, "connected to", 2, 30e9); err != nil {
			t.Fatal(err)
		}
		again, err := n.runContainer("mk-e2e", "again")
		if err != nil {
			t.Fatalf("create container after restart: %v", err)
		}
		if out, _ := n.sh(again, "cat /proc/self/mountinfo"); mountinfoLine(out, "/vol/shared") == "" {
			t.Errorf("container created after the restart lacks /vol/shared:\n%s", out)
		}
	})
}

// peerGroup returns the peer group number of the shared host mount at dir.
func peerGroup(t *testing.T, dir string) string {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	fields, _, _ := strings.Cut(mountinfoLine(string(mi), dir), " - ")
	for _, f := range strings.Fields(fields) {
		if g, ok := strings.CutPrefix(f, "shared:"); ok {
			return g
		}
	}
	t.Fatalf("host mount %s is not shared: %q", dir, fields)
	return ""
}

// mountinfoLine returns the mountinfo line whose mount point is dst, or "".
func mountinfoLine(mountinfo, dst string) string {
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dst {
			return line
		}
	}
	return ""
}
