//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestKubeHostPathSubPath: with the plugin attached, a hostPath subPath must start as it does
// with kubelet alone. On the real node a pod that mounts a hostPath with subPath, a file and a
// directory, runs with the plugin attached (subPathRepair on, the default), once in a runtime
// class of the plugin and once in no class, exactly as kubelet alone runs it; a configMap key
// beside them still gets its private copy. Before the fix both pods were refused: "stale
// subPath mount .../volume-subpaths/host/c/0 ... not repaired: cannot find the volume's
// directory".
func TestKubeHostPathSubPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := newKubeNode(t, ctx, harness.KubeOptions{})
	n.startPlugin(true)

	host := filepath.Join(n.dir, "hostpath")
	if err := os.MkdirAll(filepath.Join(host, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"app.conf": "from-host-file\n", "conf.d/x.conf": "from-host-dir\n"} {
		if err := os.WriteFile(filepath.Join(host, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.api.CreateConfigMap(ctx, "default", "cfg", map[string]string{"key": "from-configmap\n"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, class string }{{"hostpath-in-class", "mk-kube"}, {"hostpath-no-class", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			id := n.runningContainer(podSpec{
				name: tc.name, runtimeClass: tc.class, script: "exec sleep 3600",
				volumes: []any{
					map[string]any{"name": "host", "hostPath": map[string]any{"path": host, "type": "Directory"}},
					map[string]any{"name": "cfg", "configMap": map[string]any{"name": "cfg"}},
				},
				mounts: []any{
					map[string]any{"name": "host", "mountPath": "/etc/app.conf", "subPath": "app.conf"},
					map[string]any{"name": "host", "mountPath": "/etc/conf.d", "subPath": "conf.d"},
					map[string]any{"name": "cfg", "mountPath": "/etc/key", "subPath": "key"},
				},
			})
			want := map[string]string{"/etc/app.conf": "from-host-file\n", "/etc/conf.d/x.conf": "from-host-dir\n", "/etc/key": "from-configmap\n"}
			if tc.class != "" {
				want["/class/marker"] = "from-class\n"
			}
			for path, content := range want {
				out, stderr, code, err := n.ctrd.CRI().Exec(ctx, id, "cat", path)
				if err != nil || code != 0 || out != content {
					t.Errorf("cat %s = %q, %q, exit %d, %v; want %q", path, out, stderr, code, err, content)
				}
			}
			// The container sees the host's file live, as kubelet's bind shows it: the hostPath
			// subPath was left as kubelet bound it, not copied.
			if err := os.WriteFile(filepath.Join(host, "conf.d", "later.conf"), []byte(tc.name+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, _, code, err := n.ctrd.CRI().Exec(ctx, id, "cat", "/etc/conf.d/later.conf"); err != nil || code != 0 || out != tc.name+"\n" {
				t.Errorf("a file written to the hostPath directory later reads %q (exit %d, %v) in the container, want %q", out, code, err, tc.name+"\n")
			}
			// The configMap key is bound from a private copy (the #127602 fix still applies).
			if out, _, code, err := n.ctrd.CRI().Exec(ctx, id, "sh", "-c", "grep ' /etc/key ' /proc/self/mountinfo"); err != nil || code != 0 || !strings.Contains(out, "mountkeeper-subpath") {
				t.Errorf("/etc/key's mount is %q (exit %d, %v), want the private copy's tmpfs (mountkeeper-subpath)", out, code, err)
			}
		})
	}
}
