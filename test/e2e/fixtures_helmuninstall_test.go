//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
nodeLabels:
  criSocket: CRISOCKET
  interval: 1s
hostNamespacesPID: HOST_PID
metrics:
  nodeListener: {enabled: false, port: 9659}
runtimeClasses:
  - name: mk-helm
    mounts:
      - {source: DIR/src/helm, destination: /helm, readOnly: true}
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [SSHOPTS]}
config:
  kubeletRoot: KUBELET
  stateDir: DIR/state
`

// helmUninstall is TestHelmUninstall's node: controllers on, in a network of its own with a
// service proxy, the chart's image imported, an sshd on the host forwarded into the node's
// network, the chart's values written, and the node's snapshot before any install. Each
// subtest installs the chart on it and leaves it as before the install.
type helmUninstall struct {
	n         *deployNode
	ctx       context.Context
	helmBin   string
	chart     string
	values    string
	configDir string   // containerd's config directory
	keys      []string // the chart's network mounts' keys (the sshfs one)
	before    uninstallSnapshot
}

// newHelmUninstall starts the node, or skips the test when what it needs is missing.
func newHelmUninstall(t *testing.T, ctx context.Context) *helmUninstall {
	t.Helper()
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

	u := &helmUninstall{n: n, ctx: ctx, helmBin: helmBin, chart: filepath.Join(deployDir, "helm", "mountkeeper"),
		values: filepath.Join(n.dir, "values.yaml"), configDir: filepath.Dir(n.ctrd.ConfigPath())}
	text := strings.NewReplacer("TAG", tag, "CONFIG", n.ctrd.ConfigPath(), "DROPIN", filepath.Join(u.configDir, "conf.d", "99-mountkeeper.toml"),
		"CRISOCKET", n.ctrd.Socket(), "SOCKET", n.ctrd.NRISocket(), "HOST_PID", strconv.Itoa(os.Getpid()), "KUBELET", n.kube.RootDir(),
		"EXPORT", sshd.Export(), "SSHOPTS", strings.Join(sshd.ClientOptions(), ", ")).Replace(helmUninstallValues)
	if err := os.WriteFile(u.values, []byte(strings.ReplaceAll(text, "DIR", n.dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The agent's config as the chart renders it: its network mounts' scopes end with the test,
	// and the snapshot looks for them.
	rendered, err := n.kube.Command(helmBin, "template", "mountkeeper", u.chart,
		"--namespace", deployNS, "--values", u.values, "--show-only", "templates/configmap.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(rendered, &cm); err != nil {
		t.Fatal(err)
	}
	for _, rc := range n.scopes.add(t, []byte(cm.Data["config.yaml"])).RuntimeClasses {
		for _, spec := range rc.NetworkSpecs() {
			u.keys = append(u.keys, spec.Key())
		}
	}
	if len(u.keys) != 1 {
		t.Fatalf("the chart's config has network mounts %v, want the sshfs one", u.keys)
	}
	u.before = u.snap()
	return u
}

// helm runs the pinned helm on the node's cluster with a home of its own, logs and returns
// its output.
func (u *helmUninstall) helm(t *testing.T, args ...string) (string, error) {
	home := t.TempDir()
	cmd := u.n.kube.Command(u.helmBin, append(args, "--kubeconfig", u.n.kube.AdminKubeconfig())...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	t.Logf("helm %s: %v\n%s", args[0], err, out)
	return string(out), err
}

// snap is the node's uninstall snapshot.
func (u *helmUninstall) snap() uninstallSnapshot { return u.n.helmSnapshot(u.configDir, u.keys) }

// requireAsBefore fails the subtest unless the node is as before the install (within 20 s):
// each subtest installs the chart on such a node, and one that a failed subtest before it
// left otherwise is not where its checks start from.
func (u *helmUninstall) requireAsBefore(t *testing.T) {
	t.Helper()
	if now := waitSnapshot(u.snap, u.before, 20*time.Second); !reflect.DeepEqual(now, u.before) {
		t.Fatalf("before the install the node differs from its first snapshot (left by a failed subtest?): %s", u.before.diff(now))
	}
}

// install: the agent's pod from the DaemonSet controller, containerd restarted for the
// handler (as the chart's NOTES say), a class pod reading its mount. uninstallTimeout is how
// long helm uninstall waits for the nodes (uninstall.timeout).
func (u *helmUninstall) install(t *testing.T, pod string, uninstallTimeout time.Duration) {
	t.Helper()
	n, ctx := u.n, u.ctx
	if _, err := u.helm(t, "install", "mountkeeper", u.chart, "--namespace", deployNS, "--create-namespace", "--values", u.values,
		"--set", "uninstall.timeout="+uninstallTimeout.String()); err != nil {
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
	if len(u.snap().Cgroups) == 0 {
		t.Fatalf("no scope of the sshfs mount %v: the snapshot would not see one left behind", u.keys)
	}
	if _, err := os.Stat(filepath.Join(n.dir, "state", "guard.key")); err != nil {
		t.Fatalf("no guard key after the install: %v", err)
	}
}

// deletePod deletes a pod of default and waits until it is gone.
func (u *helmUninstall) deletePod(t *testing.T, name string) {
	t.Helper()
	n, ctx := u.n, u.ctx
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
func (u *helmUninstall) asBefore(t *testing.T) {
	t.Helper()
	if after := waitSnapshot(u.snap, u.before, 20*time.Second); !reflect.DeepEqual(after, u.before) {
		t.Errorf("after helm uninstall the node differs from before the install: %s", u.before.diff(after))
	}
}

// uninstallDS is the API path of the uninstall DaemonSet.
const uninstallDS = "/apis/apps/v1/namespaces/" + deployNS + "/daemonsets/mountkeeper-uninstall"

// finishByItself waits until the uninstall DaemonSet's pod, left by a refused uninstall,
// is done (kubelet retries its init containers), deletes the DaemonSet as the message
// says, and checks the node. Up to 3 minutes: unconfigure refuses while the deleted class
// pod's sandbox shim still runs the class's runtime binary, and kubelet removes a deleted
// pod's sandbox only at its next garbage collection (once a minute); 90 s was too short
// once on a loaded machine.
func (u *helmUninstall) finishByItself(t *testing.T) {
	t.Helper()
	n, ctx := u.n, u.ctx
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
	u.asBefore(t)
}
