//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// Pods whose processes are not host root get class mounts they can use as root, as kubelet's
// own volumes are idmapped for them. A user-namespaced pod is asked for as
// kubelet does for hostUsers: false (harness.UsernsHostID: container 0 is host 200000).

const usernsConfig = `
unmountGrace: 1s
runtimeClasses:
  mk-uns:
    mounts:
      - {source: SRC/priv, destination: /vol/priv, propagation: None}
      - {source: SRC/slave, destination: /vol/slave, propagation: HostToContainer}
  mk-bidi:
    allowBidirectionalForUnprivileged: true
    mounts:
      - {source: SRC/bidi, destination: /vol/bidi, propagation: Bidirectional}
  mk-ssh:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [SSHOPTS]}
  mk-ssh-open:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [SSHOPTS], allowWithoutIdmap: true}
`

// TestUserNamespace: containerd 2.4.2 + runc 1.5.2 over NRI. In a user-namespaced pod the
// class bind mounts (rprivate and rslave) are idmapped: owners 0:0 inside, root reads a 0600
// file of host root, a write lands as host 0:0; a tmpfs mounted below the rslave source after
// the start arrives by propagation un-idmapped (65534). A pod without a user namespace is
// unchanged (no idmap). An sshfs class is refused in a user-namespaced pod naming FUSE and
// allowWithoutIdmap, and with allowWithoutIdmap starts and reads; without a user namespace a
// runAsUser 1000 container reads a 0644 file on it and is refused a 0600 one (allow_other and
// default_permissions by default). Bidirectional in a user-namespaced pod is refused naming
// the user namespace, though the class allows it for unprivileged containers.
func TestUserNamespace(t *testing.T) {
	testenv.Require(t, append([]string{"root"}, sshfsNeeds...)...)
	work := harness.WorkDir(t, "mk-uns-")
	sshd, err := harness.StartSSHD(work)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sshd.Stop)
	fillSource(t, sshd.Export())
	sshOpts := strings.Join(sshd.ClientOptions(), ", ")
	cfg := strings.NewReplacer("EXPORT", sshd.Export(), "SSHOPTS", sshOpts).Replace(usernsConfig)

	n := newNode(t, harness.KindContainerd, []string{"mk-uns", "mk-bidi", "mk-ssh", "mk-ssh-open"}, cfg)
	n.endNetworkScopes()
	if err := n.ctrd.AllowUserNamespaces(); err != nil {
		t.Fatal(err)
	}
	priv := n.sourceTmpfs("priv", "private")
	slave := n.sourceTmpfs("slave", "shared")
	n.sourceTmpfs("bidi", "shared")
	fillSource(t, priv)
	fillSource(t, slave)

	uns, err := n.runUserns("mk-uns", "uns", true, nil)
	if err != nil {
		t.Fatalf("user-namespaced container of mk-uns: %v", err)
	}
	t.Run("user namespace: class bind mounts are idmapped", func(t *testing.T) {
		if out, _ := n.sh(uns, "cat /proc/self/uid_map"); !strings.Contains(strings.Join(strings.Fields(out), " "), "0 200000 65536") {
			t.Fatalf("the container has no user namespace mapping 0 to 200000: uid_map %q", out)
		}
		for _, v := range []struct{ dst, host string }{{"/vol/priv", priv}, {"/vol/slave", slave}} {
			if m := n.mountinfoOf(uns, v.dst); !strings.Contains(m.Options, "idmapped") {
				t.Errorf("%s is not idmapped: %s", v.dst, mountLine(m))
			}
			if out, code := n.sh(uns, "stat -c %u:%g "+v.dst+" "+v.dst+"/secret"); code != 0 || out != "0:0\n0:0\n" {
				t.Errorf("%s: owners seen %q (exit %d), want 0:0 for the directory and the file", v.dst, out, code)
			}
			if out, code := n.sh(uns, "cat "+v.dst+"/secret"); code != 0 || out != "secret of host root\n" {
				t.Errorf("%s: root reads the 0600 file of host root: %q (exit %d)", v.dst, out, code)
			}
			if _, code := n.sh(uns, "echo written > "+v.dst+"/new"); code != 0 {
				t.Errorf("%s: root cannot write (exit %d)", v.dst, code)
			} else if got := hostOwner(t, filepath.Join(v.host, "new")); got != "0:0" {
				t.Errorf("%s: a write lands as host %s, want 0:0", v.dst, got)
			}
		}
	})

	t.Run("rslave: a mount arriving later by propagation is not idmapped", func(t *testing.T) {
		late := filepath.Join(slave, "late")
		if err := harness.MountTmpfs(late, "private"); err != nil {
			t.Fatal(err)
		}
		fillSource(t, late)
		out, code := n.sh(uns, "stat -c %u:%g /vol/slave/late /vol/slave/late/public; cat /vol/slave/late/public; cat /vol/slave/late/secret")
		t.Logf("in the container (exit %d): %q", code, out)
		if !strings.HasPrefix(out, "65534:65534\n65534:65534\npublic of host root\n") || code == 0 {
			t.Errorf("the propagated mount: got %q (exit %d), want owners 65534, the 0644 file readable, the 0600 one refused", out, code)
		}
		if m := n.mountinfoOf(uns, "/vol/slave/late"); strings.Contains(m.Options, "idmapped") {
			t.Errorf("the propagated mount is idmapped: %s", mountLine(m))
		}
	})

	t.Run("no user namespace: unchanged", func(t *testing.T) {
		plain, err := n.runUserns("mk-uns", "plain", false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m := n.mountinfoOf(plain, "/vol/priv"); strings.Contains(m.Options, "idmapped") {
			t.Errorf("idmapped without a user namespace: %s", mountLine(m))
		}
		if out, code := n.sh(plain, "stat -c %u:%g /vol/priv/secret; cat /vol/priv/secret"); code != 0 || out != "0:0\nsecret of host root\n" {
			t.Errorf("got %q (exit %d)", out, code)
		}
	})

	t.Run("sshfs in a user-namespaced pod: refused by default, naming FUSE and the opt-in", func(t *testing.T) {
		_, err := n.runUserns("mk-ssh", "ssh-uns", true, nil)
		if err == nil || !strings.Contains(err.Error(), "its fuse.sshfs filesystem cannot be idmapped") || !strings.Contains(err.Error(), "allowWithoutIdmap: true") {
			t.Fatalf("got %v, want the refusal naming fuse.sshfs and allowWithoutIdmap", err)
		}
		t.Logf("refusal: %v", err)
	})

	t.Run("sshfs with allowWithoutIdmap: starts, reads as 65534", func(t *testing.T) {
		id, err := n.runUserns("mk-ssh-open", "ssh-open", true, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, code := n.sh(id, "stat -c %u:%g /data/public; cat /data/public; cat /data/secret")
		t.Logf("in the container (exit %d): %q", code, out)
		if !strings.HasPrefix(out, "65534:65534\npublic of host root\n") || code == 0 {
			t.Errorf("got %q (exit %d), want owner 65534, the 0644 file read, the 0600 one refused", out, code)
		}
	})

	t.Run("runAsUser 1000 reads an sshfs mount, the kernel checks modes", func(t *testing.T) {
		uid := int64(1000)
		id, err := n.runUserns("mk-ssh", "ssh-1000", false, &uid)
		if err != nil {
			t.Fatal(err)
		}
		if out, code := n.sh(id, "id -u; cat /data/public"); code != 0 || out != "1000\npublic of host root\n" {
			t.Errorf("uid 1000 reading the 0644 file: %q (exit %d)", out, code)
		}
		if out, code := n.sh(id, "cat /data/secret"); code == 0 {
			t.Errorf("uid 1000 read the 0600 file of root: %q", out)
		}
	})

	t.Run("Bidirectional in a user-namespaced pod: refused naming the user namespace", func(t *testing.T) {
		_, err := n.runUserns("mk-bidi", "bidi-uns", true, nil)
		if err == nil || !strings.Contains(err.Error(), "rshared (Bidirectional) is refused for a container with a user namespace") {
			t.Fatalf("got %v, want the user namespace refusal", err)
		}
		t.Logf("refusal: %v", err)
	})
}

// TestHookRuncUserNamespace: the createRuntime hook under plain runc 1.5.2, for a bundle with
// a user namespace (0 -> 200000): the detached clones are idmapped with the container's user
// namespace before they are attached, so the container sees 0:0, reads a 0600 file of host
// root and its writes land as host 0:0; a mount that reaches the rslave one later is not
// idmapped.
func TestHookRuncUserNamespace(t *testing.T) {
	w := newHookWorld(t)
	base := w.sources("uns")
	for _, d := range []string{"private", "slave"} {
		fillSource(t, filepath.Join(base, d))
	}
	w.writeConfig(fmt.Sprintf(`  mk-uns:
    mounts:
      - {source: %[1]s/private, destination: /vol/private, propagation: None}
      - {source: %[1]s/slave, destination: /vol/slave, propagation: HostToContainer}
`, base))
	// The mapped root must reach the bundle's rootfs.
	for _, d := range []string{w.dir, filepath.Join(w.dir, "bundles")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	bundle := w.bundle("uns", func(s *oci.Spec) {
		s.Hooks = w.runcExampleHooks("mk-uns")
		s.Linux.Namespaces = append(s.Linux.Namespaces, oci.LinuxNamespace{Type: oci.UserNamespace})
		m := []oci.LinuxIDMapping{{ContainerID: 0, HostID: harness.UsernsHostID, Size: harness.UsernsLength}}
		s.Linux.UIDMappings, s.Linux.GIDMappings = m, m
	})
	if err := w.run("mk-hook-uns", bundle); err != nil {
		t.Fatalf("runc run: %v", err)
	}
	ex := w.exec("mk-hook-uns")
	sh := func(script string) (string, int) {
		out, _, code, err := ex(w.ctx, "sh", "-c", script)
		if err != nil {
			t.Fatal(err)
		}
		return out, code
	}
	for _, d := range []string{"private", "slave"} {
		dst := "/vol/" + d
		if out, code := sh("stat -c %u:%g " + dst + " " + dst + "/secret; cat " + dst + "/secret"); code != 0 || out != "0:0\n0:0\nsecret of host root\n" {
			t.Errorf("%s: got %q (exit %d), want owners 0:0 and the 0600 file read", dst, out, code)
		}
		if _, code := sh("echo written > " + dst + "/new"); code != 0 {
			t.Errorf("%s: root cannot write (exit %d)", dst, code)
		} else if got := hostOwner(t, filepath.Join(base, d, "new")); got != "0:0" {
			t.Errorf("%s: a write lands as host %s, want 0:0", dst, got)
		}
	}
	if out, _ := sh("grep ' /vol/private ' /proc/self/mountinfo"); !strings.Contains(out, "idmapped") {
		t.Errorf("/vol/private is not idmapped: %s", out)
	}
	late := filepath.Join(base, "slave", "late")
	if err := harness.MountTmpfs(late, "private"); err != nil {
		t.Fatal(err)
	}
	fillSource(t, late)
	out, code := sh("stat -c %u:%g /vol/slave/late/public; cat /vol/slave/late/secret")
	t.Logf("propagated mount in the container (exit %d): %q", code, out)
	if !strings.HasPrefix(out, "65534:65534\n") || code == 0 {
		t.Errorf("the propagated mount: %q (exit %d), want owner 65534 and the 0600 file refused", out, code)
	}
}
