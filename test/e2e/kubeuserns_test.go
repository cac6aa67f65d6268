//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// kubeUsernsConfig: one class whose mount is a tmpfs, as the hostPath volume beside it.
const kubeUsernsConfig = `
kubeletRoot: KUBELET
stateDir: SRC/state
runtimeClasses:
  mk-kube:
    mounts:
      - {source: SRC/class, destination: /class, propagation: None}
`

// TestKubeUserNamespace: a user-namespaced pod can use its class mount as root, as it can its
// kubelet volumes. On the real kubelet: a hostUsers: false pod of RuntimeClass
// mk-kube, with the class mount (a tmpfs holding a 0600 and a 0644 file of host root) beside a
// hostPath volume of the same kind. Inside, both show owners 0:0, root reads the 0600 file on
// both, and a write lands as host 0:0 on both: the class mount behaves as kubelet's own
// idmapped volume. A plain pod (hostUsers default) of the class is unchanged (not idmapped).
func TestKubeUserNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	testenv.Require(t, "root")
	netDir := harness.WorkDir(t, "mk-kuns-")
	conf := podNetwork(t, netDir)
	n := newKubeNodeCtrd(t, ctx, harness.KubeOptions{}, []string{"mk-kube"},
		harness.Options{CNIBinDir: cniBinDir, CNIConfDir: conf})
	if err := n.ctrd.AllowUserNamespaces(); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(n.dir, "src")
	sources := map[string]string{"/class": filepath.Join(src, "class"), "/hp": filepath.Join(src, "hp")}
	for _, p := range sources {
		if err := harness.MountTmpfs(p, "private"); err != nil {
			t.Fatal(err)
		}
		fillSource(t, p)
	}

	config := filepath.Join(n.dir, "config.yaml")
	text := strings.NewReplacer("KUBELET", n.kube.RootDir(), "SRC", src).Replace(kubeUsernsConfig)
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	plugin, err := harness.StartPlugin(ctx, harness.PluginOptions{Binary: n.bin, Config: config,
		Socket: n.ctrd.NRISocket(), Log: testWriter{t, "mountkeeper"}})
	if err != nil {
		t.Fatalf("start mountkeeper: %v", err)
	}
	t.Cleanup(plugin.Stop)

	hostPath := podSpec{
		runtimeClass: "mk-kube", script: "exec sleep 3600",
		volumes: []any{map[string]any{"name": "hp", "hostPath": map[string]any{"path": sources["/hp"], "type": "Directory"}}},
		mounts:  []any{map[string]any{"name": "hp", "mountPath": "/hp"}},
	}
	sh := func(id, script string) (string, int) {
		t.Helper()
		out, stderr, code, err := n.ctrd.CRI().Exec(ctx, id, "sh", "-c", script)
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return out + stderr, code
	}
	mountOf := func(id, dst string) *mountinfo.Info {
		t.Helper()
		out, _ := sh(id, "cat /proc/self/mountinfo")
		if m := mountIn(t, out, dst); m != nil {
			return m
		}
		t.Fatalf("no mount at %s in the container:\n%s", dst, out)
		return nil
	}

	t.Run("hostUsers false: class mount and hostPath both idmapped", func(t *testing.T) {
		p := hostPath
		p.name = "uns"
		id := n.runningContainerWith(p, func(spec map[string]any) {
			delete(spec, "hostNetwork")
			spec["hostUsers"] = false
		})
		if out, _ := sh(id, "cat /proc/self/uid_map"); strings.Join(strings.Fields(out), " ") == "0 0 4294967295" {
			t.Fatalf("the pod has no user namespace: uid_map %q", out)
		} else {
			t.Logf("uid_map: %s", strings.Join(strings.Fields(out), " "))
		}
		if out, _ := sh(id, "ip -4 -o addr show eth0"); !strings.Contains(out, "169.254.77.") {
			t.Errorf("the pod has no address of the test's CNI network on eth0: %q", out)
		}
		for _, dst := range []string{"/hp", "/class"} {
			m := mountOf(id, dst)
			stat, _ := sh(id, "stat -c %u:%g "+dst+" "+dst+"/secret "+dst+"/public")
			read, readCode := sh(id, "cat "+dst+"/secret")
			_, writeCode := sh(id, "echo written > "+dst+"/new")
			written := "-"
			if writeCode == 0 {
				written = hostOwner(t, filepath.Join(sources[dst], "new"))
			}
			t.Logf("%-6s idmapped=%v owners(dir,0600,0644)=%s read 0600: exit %d; write lands as host %s",
				dst, strings.Contains(m.Options, "idmapped"), strings.Join(strings.Fields(stat), ","), readCode, written)
			if !strings.Contains(m.Options, "idmapped") {
				t.Errorf("%s is not idmapped: %s", dst, mountLine(m))
			}
			if stat != "0:0\n0:0\n0:0\n" {
				t.Errorf("%s: owners seen %q, want 0:0 for the directory and both files", dst, stat)
			}
			if readCode != 0 || read != "secret of host root\n" {
				t.Errorf("%s: root reading the 0600 file of host root: %q (exit %d)", dst, read, readCode)
			}
			if written != "0:0" {
				t.Errorf("%s: a write lands as host %s (write exit %d), want 0:0", dst, written, writeCode)
			}
		}
	})

	t.Run("hostUsers default: unchanged", func(t *testing.T) {
		p := hostPath
		p.name = "plain"
		id := n.runningContainer(p)
		if out, _ := sh(id, "cat /proc/self/uid_map"); strings.Join(strings.Fields(out), " ") != "0 0 4294967295" {
			t.Errorf("the plain pod has a user namespace: uid_map %q", out)
		}
		for _, dst := range []string{"/hp", "/class"} {
			if m := mountOf(id, dst); strings.Contains(m.Options, "idmapped") {
				t.Errorf("%s idmapped without a user namespace: %s", dst, mountLine(m))
			}
			if out, code := sh(id, "stat -c %u:%g "+dst+"/secret; cat "+dst+"/secret"); code != 0 || out != "0:0\nsecret of host root\n" {
				t.Errorf("%s: got %q (exit %d)", dst, out, code)
			}
		}
	})
}
