//go:build e2e

package e2e

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestHelmUninstall: the DaemonSet's uninstall path leaves the node as it was. It installs and
// uninstalls the chart with the pinned helm on a real node whose controllers run
// (kube-controller-manager and kube-scheduler: the DaemonSet controller makes the agent's and
// the uninstall's pods, the scheduler places helm's hook pod), in a network of its own where a
// stand-in for kube-proxy lets the hook pod reach the API server at the kubernetes Service's
// address.
//
//   - helm install, containerd restarted for the class's handler, a class pod reads its bind
//     mount and its sshfs mount (sshd on the host, forwarded into the node's network); the pod
//     removed, helm uninstall succeeds and the node's runtime config and the chart's files
//     (byte for byte, mode), the state directory, its mounts, the sshfs mount's scope and the
//     agent's and FUSE daemon's processes are as before the install.
//   - installed again with a class pod running, helm uninstall fails within uninstall.timeout
//     and says which node refused and why (the class's shim), printed by helm from the hook's
//     log; the node keeps its config and the pod its mounts. Once the pod is removed the
//     uninstall DaemonSet finishes the node by itself; deleted as the message says, the node
//     is as before the install again.
//   - installed again, a pod of no class holding the sshfs host mount (a hostPath of it) and
//     the class pod removed: runtime unconfigure goes through, node cleanup refuses naming the
//     holder's container and where it has the mount; the mount and the guard key stay. The
//     holder removed, the node is finished by itself and as before the install.
//
// The node is started once (newHelmUninstall); each subtest installs the chart itself on the
// node as it was before any install (requireAsBefore), so each runs alone as well.
func TestHelmUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	u := newHelmUninstall(t, ctx)
	n := u.n
	// A successful uninstall took 9-25 s here. A refusal is known at a node's first try, a few
	// seconds after the uninstall DaemonSet's pod is created, but helm waits the whole timeout.
	const uninstallTimeout, refusalTimeout = 40 * time.Second, 25 * time.Second

	t.Run("helm uninstall with no class pod left: the node as before the install", func(t *testing.T) {
		u.requireAsBefore(t)
		u.install(t, "helm-u1", uninstallTimeout)
		u.deletePod(t, "helm-u1")
		start := time.Now()
		out, err := u.helm(t, "uninstall", "mountkeeper", "--namespace", deployNS, "--timeout", "3m")
		if err != nil {
			t.Fatalf("helm uninstall failed: %v", err)
		}
		t.Logf("helm uninstall took %v", time.Since(start).Round(time.Millisecond))
		if err := n.api.Do(ctx, "GET", uninstallDS, "", nil, nil); !harness.IsNotFound(err) {
			t.Errorf("the uninstall DaemonSet is still there after a successful uninstall (%v)", err)
		}
		if out, _ := u.helm(t, "list", "--namespace", deployNS, "--all", "--short"); strings.TrimSpace(out) != "" {
			t.Errorf("helm still lists a release: %q", out)
		}
		if !strings.Contains(out, "uninstalled") {
			t.Errorf("helm uninstall's output: %q", out)
		}
		u.asBefore(t)
	})

	t.Run("a class pod still running: helm uninstall fails naming the node and why, the node keeps what the pod uses", func(t *testing.T) {
		u.requireAsBefore(t)
		u.install(t, "helm-u2", refusalTimeout)
		out, err := u.helm(t, "uninstall", "mountkeeper", "--namespace", deployNS, "--timeout", "3m")
		if err == nil {
			t.Fatal("helm uninstall succeeded while a class pod runs")
		}
		for _, want := range []string{"node " + n.kube.NodeName(), "runtime-unconfigure", "remove the class pods first",
			"kubectl -n " + deployNS + " delete daemonset mountkeeper-uninstall"} {
			if !strings.Contains(out, want) {
				t.Errorf("helm uninstall's output does not say %q", want)
			}
		}
		if _, err := os.Stat(filepath.Join(u.configDir, "conf.d", "99-mountkeeper.toml")); err != nil {
			t.Errorf("the refused uninstall removed the drop-in: %v", err)
		}
		if _, err := os.Stat(filepath.Join(n.dir, "state", "guard.key")); err != nil {
			t.Errorf("the refused uninstall removed the guard key: %v", err)
		}
		id := n.waitRunning(t, "helm-u2", 10*time.Second)
		for file, want := range map[string]string{"/helm/marker": "helm-u\n", "/data/hello": helloSSHFS} {
			if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", file); code != 0 || out != want {
				t.Errorf("after the refused uninstall the class pod reads %q (exit %d) at %s, want %q", out, code, file, want)
			}
		}

		u.deletePod(t, "helm-u2")
		u.finishByItself(t)
	})

	t.Run("a pod of no class holds the sshfs mount: node cleanup refuses naming its container, the mount and the guard key stay", func(t *testing.T) {
		u.requireAsBefore(t)
		u.install(t, "helm-u3", refusalTimeout)
		// An operator's debugging pod with a hostPath of the sshfs host mount: no class, so
		// runtime unconfigure goes through, and node cleanup finds its container holding it.
		hostMount := filepath.Join(n.dir, "state", "mounts", u.keys[0])
		holder := n.runPod(t, "helm-holder", "", "exec sleep 3600", false,
			[]any{map[string]any{"name": "data", "hostPath": map[string]any{"path": hostMount}}},
			[]any{map[string]any{"name": "data", "mountPath": "/x", "readOnly": true}})
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, holder, "cat", "/x/hello"); code != 0 || out != helloSSHFS {
			t.Fatalf("the holder reads %q (exit %d) at /x/hello", out, code)
		}
		u.deletePod(t, "helm-u3")
		out, err := u.helm(t, "uninstall", "mountkeeper", "--namespace", deployNS, "--timeout", "3m")
		if err == nil {
			t.Fatal("helm uninstall succeeded while a pod holds the network mount")
		}
		for _, want := range []string{"node " + n.kube.NodeName(), "node-cleanup", "kept because a running container still uses it",
			hostMount, holder, "has it at /x"} {
			if !strings.Contains(out, want) {
				t.Errorf("helm uninstall's output does not say %q", want)
			}
		}
		if _, err := os.Stat(filepath.Join(u.configDir, "conf.d", "99-mountkeeper.toml")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("runtime unconfigure did not remove the drop-in (%v): no class pod ran", err)
		}
		if _, err := os.Stat(filepath.Join(n.dir, "state", "guard.key")); err != nil {
			t.Errorf("the refused cleanup removed the guard key: %v", err)
		}
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, holder, "cat", "/x/hello"); code != 0 || out != helloSSHFS {
			t.Errorf("after the refused cleanup the holder reads %q (exit %d) at /x/hello", out, code)
		}
		u.deletePod(t, "helm-holder")
		u.finishByItself(t)
	})
}
