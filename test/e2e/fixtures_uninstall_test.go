//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

func uninstall(t *testing.T, kind harness.RuntimeKind) {
	testenv.Require(t, append([]string{"root"}, sshfsNeeds...)...)
	work := harness.WorkDir(t, "mk-uninst-")
	sshd := startHelloSSHD(t, work)
	cfg := "kubeletRoot: SRC/kubelet\n" + strings.NewReplacer("CLASS", "mk-sshfs", "EXPORT", sshd.Export(),
		"OPTS", strings.Join(sshd.ClientOptions(), ", ")).Replace(upgradeConfig)
	// No handler of the class in the runtime's config: configure declares it.
	n := newNodeWithoutPlugin(t, kind, nil, cfg, "")
	var keys []string
	for _, rc := range n.endNetworkScopes().RuntimeClasses {
		for _, spec := range rc.NetworkSpecs() {
			keys = append(keys, spec.Key())
		}
	}
	// kubelet's side of a configMap subPath, as kubelet lays it out (the test's own, before
	// the snapshot: it is not mountkeeper's to remove).
	kpod := harness.KubeletPod{Root: filepath.Join(n.src(), "kubelet"), UID: "7c0ffee0-uid"}
	cfgDir := kpod.VolumeDir("kubernetes.io~configmap", "cfg")
	if _, err := harness.WriteAtomic(cfgDir, map[string]string{"app.conf": "app-v1"}); err != nil {
		t.Fatal(err)
	}
	target, err := kpod.BindSubPath(cfgDir, "cfg", "app", 0, "app.conf")
	if err != nil {
		t.Fatal(err)
	}
	snap := func() uninstallSnapshot { return n.uninstallSnapshot(keys, work) }
	before := snap()
	if len(before.Mounts) == 0 {
		t.Fatalf("no mount below the test's directories before configure (kubelet's subPath bind at %s): the snapshot sees nothing", target)
	}

	t.Logf("runtime configure: %s", n.runtimeCommand("configure"))
	if err := n.rt.Restart(n.ctx); err != nil {
		t.Fatal(err)
	}
	n.startPlugin()
	cri := n.rt.CRI()
	// start runs a container in a new class pod, again until the plugin has connected (until
	// then the guard refuses a class container, which is what it is for).
	var pods []string
	start := func(name, uid string, opts harness.ContainerOptions) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; ; i++ {
			pod, err := cri.RunPod(n.ctx, harness.PodOptions{Name: fmt.Sprintf("%s-%d", name, i), UID: uid, RuntimeHandler: "mk-sshfs"})
			if err != nil {
				t.Fatal(err)
			}
			pods = append(pods, pod)
			opts.Name = name
			id, err := cri.CreateContainer(n.ctx, pod, opts)
			if err == nil {
				if err = cri.StartContainer(n.ctx, id); err == nil {
					return id
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("class container %s: %v", name, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	reader := start("reader", "", harness.ContainerOptions{Args: []string{"sh", "-c", "cat /data/hello; sleep 1000"}})
	app := start("app", kpod.UID, harness.ContainerOptions{Mounts: []harness.Mount{{HostPath: target, ContainerPath: "/etc/app.conf", ReadOnly: true}}})
	if out, _ := n.sh(reader, "cat /data/hello"); out != helloSSHFS {
		t.Fatalf("the class container reads %q through sshfs, want %q", out, helloSSHFS)
	}
	if out, _ := n.sh(app, "cat /etc/app.conf; grep ' /etc/app.conf ' /proc/self/mountinfo"); !strings.HasPrefix(out, "app-v1") || !strings.Contains(out, "mountkeeper-subpath") {
		t.Fatalf("the subPath container reads %q, want app-v1 from the private copy (mountkeeper-subpath tmpfs)", out)
	}
	mounted := snap()
	if reflect.DeepEqual(mounted, before) {
		t.Fatal("the pods changed nothing the snapshot sees")
	}
	t.Logf("while the pods run, beside the snapshot before configure: %s", before.diff(mounted))

	t.Run("while class pods run, runtime unconfigure refuses", func(t *testing.T) {
		out, err := exec.Command(n.bin, append([]string{"runtime", "unconfigure"}, n.configureArgs()...)...).CombinedOutput()
		t.Logf("runtime unconfigure: %v\n%s", err, out)
		if err == nil || !strings.Contains(string(out), "remove the class pods first") || !strings.Contains(string(out), "runs "+filepath.Join(n.dir, "install", "class", "mk-sshfs")) {
			t.Errorf("runtime unconfigure with class pods running: %v, want a refusal naming the class's processes", err)
		}
	})
	t.Run("while they run, node cleanup refuses and names them", func(t *testing.T) {
		n.plugin.Stop()
		defer n.startPlugin()
		out, err := n.nodeCleanup()
		if err == nil {
			t.Error("node cleanup succeeded while containers use its mounts")
		}
		for what, want := range map[string]string{"the sshfs reader": reader, "the subPath copy's container": app,
			"the copies' tmpfs": filepath.Join(n.src(), "state", "subpath")} {
			if !strings.Contains(out, want) {
				t.Errorf("node cleanup's refusal does not name %s (%s)", what, want)
			}
		}
		if after := snap(); !reflect.DeepEqual(after.Mounts, mounted.Mounts) {
			t.Errorf("the refused cleanup changed the mounts: %s", mounted.diff(after))
		}
		if _, err := os.Stat(filepath.Join(n.src(), "state", "guard.key")); err != nil {
			t.Errorf("the refused cleanup removed the guard key: %v", err)
		}
	})

	for _, pod := range pods {
		if err := cri.RemovePod(n.ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	n.plugin.Stop()
	t.Logf("runtime unconfigure: %s", n.runtimeCommand("unconfigure"))
	if out, err := n.nodeCleanup(); err != nil {
		t.Fatalf("node cleanup: %v\n%s", err, out)
	}
	// The FUSE daemon leaves after its unmount; give it its moment.
	if after := waitSnapshot(snap, before, 5*time.Second); !reflect.DeepEqual(after, before) {
		t.Errorf("after the uninstall the node differs from before configure: %s", before.diff(after))
	}
}
