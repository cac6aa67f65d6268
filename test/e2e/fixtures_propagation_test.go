//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
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

func testPropagation(t *testing.T, kind harness.RuntimeKind) {
	n := newNode(t, kind, []string{"mk-e2e", "mk-bad"}, propagationConfig)
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

	// checkThreeWay compares the container's mount tags with the host source's peer group:
	// an rshared mount anywhere in the container makes the runtime share the whole rootfs,
	// so every container mount is "shared:" in a group of its own; what matters is the
	// relation to the host's group. Then it probes both directions with real mounts.
	t.Run("mounts relate to the host's peer group and propagate as asked", func(t *testing.T) {
		checkThreeWay(t, n.ctx, func(ctx context.Context, cmd ...string) (string, string, int, error) {
			return n.rt.CRI().Exec(ctx, id, cmd...)
		}, host)
	})

	t.Run("rshared from a private source fails with the plugin's error", func(t *testing.T) {
		_, err := n.runContainer("mk-bad", "bad")
		if err == nil {
			t.Fatal("container of class mk-bad was created")
		}
		for _, want := range []string{"mountkeeper", `runtime class "mk-bad"`, "container default/bad-pod/bad:",
			n.src() + "/private -> /vol/shared (rshared)", "is private", "mount --make-rshared " + n.src() + "/private"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
	})

	// CRI-O takes the container name it gives NRI plugins from kubelet's labels only; without
	// them the plugin names the container by its ID. containerd takes it from the metadata.
	t.Run("without kubelet's labels the error still names the container", func(t *testing.T) {
		cri := n.rt.CRI()
		pod, err := cri.RunPod(n.ctx, harness.PodOptions{Name: "nolabels-pod", RuntimeHandler: "mk-bad", NoKubeletLabels: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cri.CreateContainer(n.ctx, pod, harness.ContainerOptions{Name: "nolabels", Privileged: true, NoKubeletLabels: true})
		if err == nil {
			t.Fatal("container of class mk-bad was created")
		}
		named := regexp.MustCompile(`container default/nolabels-pod/nolabels:`)
		if kind == harness.KindCRIO {
			named = regexp.MustCompile(`container [^ ]*/[0-9a-f]{64}:`)
		}
		if !named.MatchString(err.Error()) {
			t.Errorf("error does not name the container as %s:\n%v", named, err)
		}
		t.Logf("%s without labels: %v", kind, err)
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

	t.Run("after a runtime restart the plugin serves the next container", func(t *testing.T) {
		if err := n.rt.Restart(n.ctx); err != nil {
			t.Fatalf("restart %s: %v", kind, err)
		}
		// The plugin logs "connected to" on every (re)registration: wait for the second.
		if err := n.plugin.WaitLog(n.ctx, "connected to", 2, 30e9); err != nil {
			t.Fatal(err)
		}
		again, err := n.runContainer("mk-e2e", "again")
		if err != nil {
			t.Fatalf("create container after restart: %v", err)
		}
		if out, _ := n.sh(again, "cat /proc/self/mountinfo"); mountIn(t, out, "/vol/shared") == nil {
			t.Errorf("container created after the restart lacks /vol/shared:\n%s", out)
		}
	})
}
