//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// helmUninstallValues are TestHelmUninstall's chart values: a class with a bind mount and an
// sshfs mount, the node's paths (containerd's config, the NRI socket, the install and state
// directories), the test process as the
// "host's init" (hostNamespacesPID: this machine's PID 1 is a sandbox whose namespaces
// cannot be opened, and the test's are the node's), no node listener. Upper-case words are
// replaced.
const helmUninstallValues = `image:
  tag: TAG
containerd:
  configFile: CONFIG
  dropIn: DROPIN
installDir: DIR/hookbin
nri:
  socket: SOCKET
hostNamespacesPID: HOST_PID
metrics:
  nodeListener: {enabled: false, port: 9659}
uninstall:
  timeout: 40s
runtimeClasses:
  - name: mk-helm
    mounts:
      - {source: DIR/src/helm, destination: /helm, readOnly: true}
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [SSHOPTS]}
config:
  kubeletRoot: KUBELET
  stateDir: DIR/state
`

// TestHelmUninstall (issue 24 item 5, the DaemonSet's uninstall path) installs and uninstalls
// the chart with the pinned helm on a real node whose controllers run (kube-controller-manager
// and kube-scheduler: the DaemonSet controller makes the agent's and the uninstall's pods, the
// scheduler places helm's hook pod), in a network of its own where a stand-in for kube-proxy
// lets the hook pod reach the API server at the kubernetes Service's address.
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
func TestHelmUninstall(t *testing.T) {
	bin := cmp.Or(os.Getenv("MOUNTKEEPER_BIN"), "/var/cache/mountkeeper-test/bin")
	helmBin := filepath.Join(bin, "helm")
	testenv.Require(t, append([]string{"root", helmBin}, sshfsNeeds...)...)
	if why := harness.NodeNetworkMissing(); why != "" {
		testenv.Skip(t, "no node network: %s", why)
	}
	opts := harness.KubeOptions{BinDir: bin, ControlPlane: true,
		FeatureGates:              map[string]bool{"KubeletCrashLoopBackOffMax": true},
		MaxContainerRestartPeriod: time.Second}
	if why := harness.KubeMissing(opts); why != "" {
		testenv.Skip(t, "no Kubernetes node: %s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	network, netDir := startNodeNetwork(t, ctx)
	opts.Network = network
	// No handler of the class in containerd's config: the chart's configure declares it.
	n := &deployNode{kubeNode: newKubeNodeCtrd(t, ctx, opts, nil, harness.Options{
		BinDir: bin, Network: network, CNIBinDir: network.CNIBinDir(), CNIConfDir: network.CNIConfDir(),
		RegistryConfigDir: filepath.Join(netDir, "registries"),
	})}
	proxy, err := n.kube.StartServiceProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	// The sshfs server runs on the host; the agent, in the node's network, reaches it at the
	// same address through a forwarder.
	sshd := startHelloSSHD(t, harness.WorkDir(t, "mk-hsshd-"))
	fwd, err := network.ForwardHostPort(sshd.Port())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fwd.Close() })
	if err := waitNodeReady(ctx, n.api, n.kube.NodeName(), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(n.dir, "src", "helm"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "src", "helm", "marker"), []byte("helm-u\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const tag = "e2e-uninstall"
	n.template = map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"image": harness.AgentImageRepository + ":" + tag}}}}
	n.installImage()

	configDir := filepath.Dir(n.ctrd.ConfigPath())
	values := filepath.Join(n.dir, "values.yaml")
	text := strings.NewReplacer("TAG", tag, "CONFIG", n.ctrd.ConfigPath(), "DROPIN", filepath.Join(configDir, "conf.d", "99-mountkeeper.toml"),
		"SOCKET", n.ctrd.NRISocket(), "HOST_PID", strconv.Itoa(os.Getpid()), "KUBELET", n.kube.RootDir(),
		"EXPORT", sshd.Export(), "SSHOPTS", strings.Join(sshd.ClientOptions(), ", ")).Replace(helmUninstallValues)
	if err := os.WriteFile(values, []byte(strings.ReplaceAll(text, "DIR", n.dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	helm := func(args ...string) (string, error) {
		home := t.TempDir()
		cmd := n.kube.Command(helmBin, append(args, "--kubeconfig", n.kube.AdminKubeconfig())...)
		cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
		out, err := cmd.CombinedOutput()
		t.Logf("helm %s: %v\n%s", args[0], err, out)
		return string(out), err
	}
	chart := filepath.Join(deployDir, "helm", "mountkeeper")
	// The agent's config as the chart renders it: its network mounts' scopes end with the test,
	// and the snapshot looks for them.
	rendered, err := n.kube.Command(helmBin, "template", "mountkeeper", filepath.Join(deployDir, "helm", "mountkeeper"),
		"--namespace", deployNS, "--values", values, "--show-only", "templates/configmap.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(rendered, &cm); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, rc := range n.scopes.add(t, []byte(cm.Data["config.yaml"])).RuntimeClasses {
		for _, spec := range rc.NetworkSpecs() {
			keys = append(keys, spec.Key())
		}
	}
	if len(keys) != 1 {
		t.Fatalf("the chart's config has network mounts %v, want the sshfs one", keys)
	}
	snap := func() uninstallSnapshot { return n.helmSnapshot(configDir, keys) }
	before := snap()

	// install: the agent's pod from the DaemonSet controller, containerd restarted for the
	// handler (as the chart's NOTES say), a class pod reading its mount.
	install := func(t *testing.T, pod string) {
		t.Helper()
		if _, err := helm("install", "mountkeeper", chart, "--namespace", deployNS, "--create-namespace", "--values", values); err != nil {
			t.Fatal(err)
		}
		agent := n.waitAgentPod(t)
		if err := n.ctrd.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		n.waitConnected(t, agent, 2)
		id := n.runPod(t, pod, "mk-helm", "exec sleep 3600", false, nil, nil)
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/helm/marker"); code != 0 || out != "helm-u\n" {
			t.Fatalf("the class pod reads %q (exit %d) at /helm/marker, want helm-u", out, code)
		}
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
			t.Fatalf("the class pod reads %q (exit %d) at /data/hello through sshfs, want %q", out, code, helloSSHFS)
		}
		if len(snap().Cgroups) == 0 {
			t.Fatalf("no scope of the sshfs mount %v: the snapshot would not see one left behind", keys)
		}
		if _, err := os.Stat(filepath.Join(n.dir, "state", "guard.key")); err != nil {
			t.Fatalf("no guard key after the install: %v", err)
		}
	}
	deletePod := func(t *testing.T, name string) {
		t.Helper()
		if err := n.api.DeletePod(ctx, "default", name, 0); err != nil {
			t.Fatal(err)
		}
		if err := harnessPoll(ctx, 60*time.Second, func() error {
			if _, err := n.api.GetPod(ctx, "default", name); !harness.IsNotFound(err) {
				return fmt.Errorf("pod %s still there (%v)", name, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// asBefore waits (bounded) until the node is as before the install.
	asBefore := func(t *testing.T) {
		t.Helper()
		if after := waitSnapshot(snap, before, 20*time.Second); !reflect.DeepEqual(after, before) {
			t.Errorf("after helm uninstall the node differs from before the install: %s", before.diff(after))
		}
	}
	uninstallDS := "/apis/apps/v1/namespaces/" + deployNS + "/daemonsets/mountkeeper-uninstall"
	// finishByItself waits until the uninstall DaemonSet's pod, left by a refused uninstall,
	// is done (kubelet retries its init containers), deletes the DaemonSet as the message
	// says, and checks the node. Up to 3 minutes: unconfigure refuses while the deleted class
	// pod's sandbox shim still runs the class's runtime binary, and kubelet removes a deleted
	// pod's sandbox only at its next garbage collection (once a minute); 90 s was too short
	// once on a loaded machine.
	finishByItself := func(t *testing.T) {
		t.Helper()
		if err := harnessPoll(ctx, 3*time.Minute, func() error {
			pods, err := n.api.ListPods(ctx, deployNS)
			if err != nil {
				return err
			}
			for _, p := range pods {
				if p.Metadata.Labels["app.kubernetes.io/component"] == "uninstall" {
					for _, c := range p.Status.ContainerStatuses {
						if c.Name == "uninstalled" && c.Ready {
							return nil
						}
					}
					return fmt.Errorf("uninstall pod %s: %s", p.Metadata.Name, statusText(&p))
				}
			}
			return errors.New("no uninstall pod")
		}); err != nil {
			t.Fatal(err)
		}
		if err := n.api.Do(ctx, "DELETE", uninstallDS, "", nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := harnessPoll(ctx, 60*time.Second, func() error {
			pods, err := n.api.ListPods(ctx, deployNS)
			for _, p := range pods {
				if p.Metadata.Labels["app.kubernetes.io/component"] == "uninstall" {
					return fmt.Errorf("uninstall pod %s still there", p.Metadata.Name)
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		asBefore(t)
	}

	t.Run("helm uninstall with no class pod left: the node as before the install", func(t *testing.T) {
		install(t, "helm-u1")
		deletePod(t, "helm-u1")
		start := time.Now()
		out, err := helm("uninstall", "mountkeeper", "--namespace", deployNS, "--timeout", "3m")
		if err != nil {
			t.Fatalf("helm uninstall failed: %v", err)
		}
		t.Logf("helm uninstall took %v", time.Since(start).Round(time.Millisecond))
		if err := n.api.Do(ctx, "GET", uninstallDS, "", nil, nil); !harness.IsNotFound(err) {
			t.Errorf("the uninstall DaemonSet is still there after a successful uninstall (%v)", err)
		}
		if out, _ := helm("list", "--namespace", deployNS, "--all", "--short"); strings.TrimSpace(out) != "" {
			t.Errorf("helm still lists a release: %q", out)
		}
		if !strings.Contains(out, "uninstalled") {
			t.Errorf("helm uninstall's output: %q", out)
		}
		asBefore(t)
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("a class pod still running: helm uninstall fails naming the node and why, the node keeps what the pod uses", func(t *testing.T) {
		install(t, "helm-u2")
		out, err := helm("uninstall", "mountkeeper", "--namespace", deployNS, "--timeout", "3m")
		if err == nil {
			t.Fatal("helm uninstall succeeded while a class pod runs")
		}
		for _, want := range []string{"node " + n.kube.NodeName(), "runtime-unconfigure", "remove the class pods first",
			"kubectl -n " + deployNS + " delete daemonset mountkeeper-uninstall"} {
			if !strings.Contains(out, want) {
				t.Errorf("helm uninstall's output does not say %q", want)
			}
		}
		if _, err := os.Stat(filepath.Join(configDir, "conf.d", "99-mountkeeper.toml")); err != nil {
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

		deletePod(t, "helm-u2")
		finishByItself(t)
	})

	t.Run("a pod of no class holds the sshfs mount: node cleanup refuses naming its container, the mount and the guard key stay", func(t *testing.T) {
		install(t, "helm-u3")
		// An operator's debugging pod with a hostPath of the sshfs host mount: no class, so
		// runtime unconfigure goes through, and node cleanup finds its container holding it.
		hostMount := filepath.Join(n.dir, "state", "mounts", keys[0])
		holder := n.runPod(t, "helm-holder", "", "exec sleep 3600", false,
			[]any{map[string]any{"name": "data", "hostPath": map[string]any{"path": hostMount}}},
			[]any{map[string]any{"name": "data", "mountPath": "/x", "readOnly": true}})
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, holder, "cat", "/x/hello"); code != 0 || out != helloSSHFS {
			t.Fatalf("the holder reads %q (exit %d) at /x/hello", out, code)
		}
		deletePod(t, "helm-u3")
		out, err := helm("uninstall", "mountkeeper", "--namespace", deployNS, "--timeout", "3m")
		if err == nil {
			t.Fatal("helm uninstall succeeded while a pod holds the network mount")
		}
		for _, want := range []string{"node " + n.kube.NodeName(), "node-cleanup", "kept because a running container still uses it",
			hostMount, holder, "has it at /x"} {
			if !strings.Contains(out, want) {
				t.Errorf("helm uninstall's output does not say %q", want)
			}
		}
		if _, err := os.Stat(filepath.Join(configDir, "conf.d", "99-mountkeeper.toml")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("runtime unconfigure did not remove the drop-in (%v): no class pod ran", err)
		}
		if _, err := os.Stat(filepath.Join(n.dir, "state", "guard.key")); err != nil {
			t.Errorf("the refused cleanup removed the guard key: %v", err)
		}
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, holder, "cat", "/x/hello"); code != 0 || out != helloSSHFS {
			t.Errorf("after the refused cleanup the holder reads %q (exit %d) at /x/hello", out, code)
		}
		deletePod(t, "helm-holder")
		finishByItself(t)
	})
}
