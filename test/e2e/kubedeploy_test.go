//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// deployDir holds the shipped manifests.
var deployDir = func() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", "deploy")
}()

// deployConfig is the ConfigMap's config in TestKubeDeploy: a class with the three
// propagations and an sshfs class. DIR, KUBELET, EXPORT and SSHOPTS are replaced.
const deployConfig = `kubeletRoot: KUBELET
stateDir: DIR/state
unmountGrace: 2s
runtimeClasses:
  mk-kube:
    mounts:
      - {source: DIR/src/host/private, destination: /vol/private, propagation: None}
      - {source: DIR/src/host/slave, destination: /vol/slave, propagation: HostToContainer}
      - {source: DIR/src/host/shared, destination: /vol/shared, propagation: Bidirectional}
  mk-sshfs:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: HostToContainer, options: [SSHOPTS]}
`

// deployNode is a real node with mountkeeper installed from deploy/.
type deployNode struct {
	*kubeNode
	manifests map[string][]map[string]any // file -> objects
	template  map[string]any              // the DaemonSet's pod template
	pluginGen int                         // plugin pods created so far
	sshd      *harness.SSHD
	hook      string // the mountkeeper-hook binary the image holds
	runtime   string // the mountkeeper-runtime binary the image holds
}

const deployNS = "mountkeeper"

// TestKubeDeploy installs mountkeeper on a real node (kubelet v1.34.4, containerd 2.4.2) from
// what ships: `make image`'s image imported into containerd, the manifests of deploy/ applied
// to the API server. There is no controller manager here, so the DaemonSet is stored but no
// controller makes its pod: the test creates a Pod from the DaemonSet's own pod template
// (with nodeName), as the DaemonSet controller would. The template's node paths are pointed at
// the test's node (containerd's config, the NRI socket, the hook and base spec directories),
// and --host-namespaces-pid at the test process: PID 1 of this machine is a sandbox process
// whose namespaces cannot be opened, and the test's namespaces are the node's here.
func TestKubeDeploy(t *testing.T) {
	testenv.Require(t, sshfsNeeds...)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	n := &deployNode{kubeNode: newKubeNodeWith(t, ctx, harness.KubeOptions{
		// A refused start (the guard) is retried every second, not after 10s, 20s, 40s...
		FeatureGates:              map[string]bool{"KubeletCrashLoopBackOffMax": true},
		MaxContainerRestartPeriod: time.Second,
	}, []string{"mk-kube", "mk-sshfs"})}
	n.readManifests()
	n.installImage()

	// The class sources: a shared tmpfs (Bidirectional and HostToContainer need it shared).
	host := filepath.Join(n.dir, "src", "host")
	if err := harness.MountTmpfs(host, "shared"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"private", "slave", "shared"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.sshd = startHelloSSHD(t, harness.WorkDir(t, "mk-kdsshd-"))
	sshOpts := strings.Join(n.sshd.ClientOptions(), ", ")
	config := strings.NewReplacer("DIR", n.dir, "KUBELET", n.kube.RootDir(), "EXPORT", n.sshd.Export(), "SSHOPTS", sshOpts).Replace(deployConfig)
	n.scopes.add(t, []byte(config))

	var plugin string
	t.Run("1 the shipped manifests install the plugin pod", func(t *testing.T) {
		n.apply(config)
		plugin = n.startPluginPod(t)
		// The init container ran `runtime configure`: containerd's config imports the drop-in,
		// which has a handler per class running the class's link to mountkeeper-runtime, the
		// wrapper is on the node. containerd reads it at its next start.
		cfg, err := os.ReadFile(n.ctrd.ConfigPath())
		if err != nil {
			t.Fatal(err)
		}
		dropIn, err := os.ReadFile(filepath.Join(filepath.Dir(n.ctrd.ConfigPath()), "conf.d", "99-mountkeeper.toml"))
		if err != nil || !strings.Contains(string(cfg), "imports = ['conf.d/99-mountkeeper.toml']") {
			t.Errorf("containerd's config does not import the drop-in (%v):\n%s", err, cfg)
		}
		for _, class := range []string{"mk-kube", "mk-sshfs"} {
			if !strings.Contains(string(dropIn), filepath.Join(n.dir, "hookbin", "class", class)) {
				t.Errorf("the drop-in lacks the handler of %s after the init container:\n%s", class, dropIn)
			}
		}
		// The runtime wrapper is the lean binary the image holds beside mountkeeper.
		installed, err := os.ReadFile(filepath.Join(n.dir, "hookbin", "mountkeeper-runtime"))
		built, berr := os.ReadFile(n.runtime)
		if err != nil || berr != nil || !bytes.Equal(installed, built) {
			t.Errorf("the init container did not install mountkeeper-runtime (read: %v, %v; %d bytes, want the %d of mountkeeper-runtime)", err, berr, len(installed), len(built))
		}
		if log := n.podLog(plugin, "runtime-configure"); !strings.Contains(log, "restart needed: containerd reads its config only at start") {
			t.Errorf("init container log: %q, want it to have written containerd's config", log)
		}
		n.checkNodeListener(t, plugin)
		// The node-install step an operator does once (docs/install.md): restart containerd.
		if err := n.ctrd.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	var classPod string
	t.Run("2 a class pod gets its mounts, a pod of no class nothing", func(t *testing.T) {
		classPod = n.runPod(t, "class-a", "mk-kube", "exec sleep 3600", true, nil, nil)
		checkThreeWay(t, ctx, n.execer(classPod), host)
		plain := n.runPod(t, "plain-a", "", "exec sleep 3600", true, nil, nil)
		if out, _, _, _ := n.ctrd.CRI().Exec(ctx, plain, "cat", "/proc/self/mountinfo"); strings.Contains(out, "/vol/") || strings.Contains(out, "/data") {
			t.Errorf("a pod without runtimeClassName has class mounts:\n%s", out)
		}
	})

	reads := filepath.Join(n.dir, "reads")
	if err := os.MkdirAll(reads, 0o755); err != nil {
		t.Fatal(err)
	}
	readerVolumes := []any{map[string]any{"name": "reads", "hostPath": map[string]any{"path": reads, "type": "Directory"}}}
	readerMounts := []any{map[string]any{"name": "reads", "mountPath": "/reads"}}
	var reader string
	t.Run("4 sshfs: one host mount for two pods, kept and adopted across a plugin pod replacement", func(t *testing.T) {
		reader = n.runPod(t, "sshfs-reader", "mk-sshfs",
			`while true; do if cat /data/hello >/dev/null 2>&1; then echo ok; else echo FAIL; fi >> /reads/log; sleep 0.1; done`,
			false, readerVolumes, readerMounts)
		other := n.runPod(t, "sshfs-other", "mk-sshfs", "exec sleep 3600", false, nil, nil)
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, other, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
			t.Errorf("second sshfs pod reads %q (exit %d)", out, code)
		}
		mountPoint, daemon := n.sshfsMount(t)
		if c := fuseMountsAt(t, mountPoint); c != 1 {
			t.Errorf("%d sshfs mounts at %s for two pods, want 1", c, mountPoint)
		}
		pluginPID := n.pluginPID(t)
		pluginCg, daemonCg := cgroupOf(t, pluginPID), cgroupOf(t, daemon)
		t.Logf("plugin pod's process %d: cgroup2 %s; FUSE daemon %d: cgroup2 %s", pluginPID, pluginCg, daemon, daemonCg)
		if daemonCg == "" || strings.HasPrefix(daemonCg+"/", pluginCg+"/") {
			t.Errorf("FUSE daemon %d in cgroup %q, inside the plugin pod's %q", daemon, daemonCg, pluginCg)
		}

		v1 := cgroupV1Paths(t, daemon)
		t.Logf("FUSE daemon's cgroup v1 memberships: %s", v1)

		okBefore, failBefore := countLog(t, filepath.Join(reads, "log"))
		n.deletePluginPod(t, plugin)
		// On a hybrid host (v1 above lists the daemon's cgroup v1 groups; empty on a unified
		// one) the daemon, and the ssh it forked, must have left the pod's v1 groups too:
		// runc kills a hostPID container's processes by them.
		if !alive(daemon) {
			t.Fatalf("FUSE daemon %d died with the plugin pod (its v1 groups: %s)", daemon, v1)
		}
		time.Sleep(2 * time.Second) // the plugin is away; the reader goes on
		plugin = n.startPluginPod(t)
		time.Sleep(time.Second)
		okAfter, failAfter := countLog(t, filepath.Join(reads, "log"))
		t.Logf("reads while the plugin pod was replaced: %d ok, %d failed (before: %d ok, %d failed)",
			okAfter-okBefore, failAfter-failBefore, okBefore, failBefore)
		if failAfter > 0 || okAfter-okBefore < 20 {
			t.Errorf("reads across the plugin pod replacement: %d ok, %d failed in all", okAfter, failAfter)
		}
		if mp, d := n.sshfsMount(t); mp != mountPoint || d != daemon {
			t.Errorf("after the replacement: mount %s, daemon %d; want %s, %d (adopted)", mp, d, mountPoint, daemon)
		}
		if c := fuseMountsAt(t, mountPoint); c != 1 {
			t.Errorf("%d sshfs mounts at %s after the replacement, want 1", c, mountPoint)
		}
		// The adoption is logged once the mount found at start-up has been probed, which runs
		// beside the connection to containerd that startPluginPod waited for: poll for it.
		if err := harnessPoll(ctx, 30*time.Second, func() error {
			if log := n.podLog(plugin, "mountkeeper"); !strings.Contains(log, "adopt") {
				return fmt.Errorf("the new plugin pod did not log an adoption within 30s:\n%s", log)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
		if log := n.podLog(plugin, "runtime-configure"); !strings.Contains(log, "nothing to change") {
			t.Errorf("the second init container changed containerd's config: %q", log)
		}
		third := n.runPod(t, "sshfs-third", "mk-sshfs", "exec sleep 3600", false, nil, nil)
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, third, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
			t.Errorf("a pod after the replacement reads %q (exit %d)", out, code)
		}
	})

	t.Run("issue 18 guard: a class pod waits while the plugin pod is away", func(t *testing.T) {
		n.deletePluginPod(t, plugin)
		pod := n.podManifest(podSpec{name: "guarded", runtimeClass: "mk-kube", script: "exec sleep 3600"})
		// Privileged: the class has an rshared (Bidirectional) mount.
		pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["securityContext"] = map[string]any{"privileged": true}
		if _, err := n.api.CreatePod(ctx, "default", pod); err != nil {
			t.Fatal(err)
		}
		want := "did not handle this container"
		var seen string
		ranEarly := false
		err := harnessPoll(ctx, 60*time.Second, func() error {
			p, err := n.api.GetPod(ctx, "default", "guarded")
			if err != nil {
				return err
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running != nil {
					ranEarly = true
					return nil
				}
			}
			text := statusText(p) + n.eventsText("default", "guarded")
			if i := strings.Index(text, want); i >= 0 {
				seen = text[max(0, strings.LastIndex(text[:i], "mountkeeper:")):min(len(text), i+200)]
				return nil
			}
			return errors.New("no refusal yet")
		})
		if ranEarly {
			t.Fatal("a class pod runs while the plugin pod is away: without its mounts")
		}
		if err != nil {
			t.Fatalf("class pod while the plugin pod is away: %v", err)
		}
		t.Logf("refusal seen by the user: %s", seen)
		plugin = n.startPluginPod(t) // its own pod runs on the default handler, unguarded
		id := n.waitRunning(t, "guarded", 60*time.Second)
		if out, _, _, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/proc/self/mountinfo"); mountinfoLine(out, "/vol/shared") == "" {
			t.Errorf("the class pod started after the plugin came back lacks its mounts:\n%s", out)
		}
	})

	t.Run("5 kubelet and containerd restarts keep the mounts; the next pods work", func(t *testing.T) {
		check := func(when string) {
			t.Helper()
			if out, _, _, _ := n.ctrd.CRI().Exec(ctx, classPod, "cat", "/proc/self/mountinfo"); mountinfoLine(out, "/vol/slave") == "" {
				t.Errorf("%s: the running class pod lost /vol/slave", when)
			}
			if out, _, code, _ := n.ctrd.CRI().Exec(ctx, reader, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
				t.Errorf("%s: the running sshfs pod reads %q (exit %d)", when, out, code)
			}
		}
		start := time.Now()
		if err := n.kube.RestartKubelet(ctx); err != nil {
			t.Fatalf("restart kubelet: %v", err)
		}
		t.Logf("kubelet restarted in %v", time.Since(start).Round(time.Millisecond))
		check("after the kubelet restart")
		n.runPod(t, "after-kubelet", "mk-kube", "exec sleep 3600", true, nil, nil)

		start = time.Now()
		if err := n.ctrd.Restart(ctx); err != nil {
			t.Fatalf("restart containerd: %v", err)
		}
		t.Logf("containerd restarted in %v", time.Since(start).Round(time.Millisecond))
		check("after the containerd restart")
		id := n.runPod(t, "after-containerd", "mk-sshfs", "exec sleep 3600", false, nil, nil)
		if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
			t.Errorf("an sshfs pod after the containerd restart reads %q (exit %d)", out, code)
		}
		_, fails := countLog(t, filepath.Join(reads, "log"))
		if fails > 0 {
			t.Errorf("the sshfs reader saw %d failed reads in all", fails)
		}
	})
}

// readManifests reads every YAML document of deploy/*.yaml and the DaemonSet's pod template.
func (n *deployNode) readManifests() {
	t := n.t
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", deployDir, err)
	}
	n.manifests = map[string][]map[string]any{}
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(r)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if obj == nil {
				continue
			}
			n.manifests[filepath.Base(f)] = append(n.manifests[filepath.Base(f)], obj)
			if obj["kind"] == "DaemonSet" && filepath.Base(f) == "daemonset.yaml" { // uninstall.yaml has the uninstall's
				n.template = dig(t, obj, "spec", "template")
			}
		}
		r.Close()
	}
	if n.template == nil {
		t.Fatalf("no DaemonSet in %s", deployDir)
	}
}

// installImage builds the image as `make image` does and imports it into the node's
// containerd under the versioned name the DaemonSet's containers give, where they find it.
func (n *deployNode) installImage() {
	t := n.t
	t.Helper()
	start := time.Now()
	image := n.templateImage()
	// The node's mountkeeper (BuildMountkeeper) and its hook, both static (no cgo).
	var err error
	if n.hook, err = harness.BuildHook(n.dir); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(n.bin)
	if err != nil {
		t.Fatal(err)
	}
	hookData, err := os.ReadFile(n.hook)
	if err != nil {
		t.Fatal(err)
	}
	if n.runtime, err = harness.BuildRuntimeWrapper(n.dir); err != nil {
		t.Fatal(err)
	}
	runtimeData, err := os.ReadFile(n.runtime)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := harness.AgentImageArchive(data, hookData, runtimeData, image)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.dir, "mountkeeper-image.tar")
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.ctrd.ImportImage(n.ctx, path, image); err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s built and imported in %v (%d bytes)", image, time.Since(start).Round(time.Millisecond), len(archive))
}

// templateImage returns the one image the DaemonSet's containers name: a versioned tag of
// harness.AgentImageRepository, never latest.
func (n *deployNode) templateImage() string {
	t := n.t
	t.Helper()
	images := map[string]bool{}
	for _, list := range []string{"initContainers", "containers"} {
		cs, _ := dig(t, n.template, "spec")[list].([]any)
		for _, c := range cs {
			images[c.(map[string]any)["image"].(string)] = true
		}
	}
	if len(images) != 1 {
		t.Fatalf("the DaemonSet's containers name %d images %v, want the agent image alone", len(images), images)
	}
	for image := range images {
		tag, ok := strings.CutPrefix(image, harness.AgentImageRepository+":")
		if !ok || tag == "" || tag == "latest" {
			t.Fatalf("the DaemonSet names image %s, want %s:<version>", image, harness.AgentImageRepository)
		}
		return image
	}
	return ""
}

// apply creates every shipped object through the API, the ConfigMap with the test's config.
func (n *deployNode) apply(config string) {
	t := n.t
	t.Helper()
	paths := map[string]string{
		"Namespace":          "/api/v1/namespaces",
		"ConfigMap":          "/api/v1/namespaces/" + deployNS + "/configmaps",
		"DaemonSet":          "/apis/apps/v1/namespaces/" + deployNS + "/daemonsets",
		"RuntimeClass":       "/apis/node.k8s.io/v1/runtimeclasses",
		"ServiceAccount":     "/api/v1/namespaces/" + deployNS + "/serviceaccounts",
		"ClusterRole":        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		"ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
	}
	for _, file := range []string{"namespace.yaml", "rbac.yaml", "configmap.yaml", "runtimeclass.yaml", "daemonset.yaml"} {
		objs := n.manifests[file]
		if len(objs) == 0 {
			t.Fatalf("deploy/%s: no objects", file)
		}
		for _, obj := range objs {
			kind, _ := obj["kind"].(string)
			path, ok := paths[kind]
			if !ok {
				t.Fatalf("deploy/%s: a %s, which this test does not know how to create", file, kind)
			}
			if kind == "ConfigMap" {
				data := dig(t, obj, "data")
				if _, ok := data["config.yaml"]; !ok {
					t.Fatalf("deploy/%s: no config.yaml key", file)
				}
				if _, err := configs.Parse([]byte(data["config.yaml"].(string))); err != nil {
					t.Errorf("deploy/%s: the shipped config does not load: %v", file, err)
				}
				data["config.yaml"] = config
			}
			if err := n.api.Do(n.ctx, "POST", path, "", obj, nil); err != nil {
				t.Fatalf("create %s from deploy/%s: %v", kind, file, err)
			}
			if kind == "Namespace" {
				n.namespaceStandIns(dig(t, obj, "metadata")["name"].(string))
			}
		}
	}
}

// namespaceStandIns creates in namespace what the controller manager, absent from this node,
// would: the default ServiceAccount, which admission wants for every pod, and the root CA
// publisher's kube-root-ca.crt, which the agent's projected ServiceAccount token volume needs.
func (n *deployNode) namespaceStandIns(namespace string) {
	t := n.t
	t.Helper()
	ca, err := os.ReadFile(n.kube.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := n.api.Do(n.ctx, "POST", "/api/v1/namespaces/"+namespace+"/serviceaccounts", "", map[string]any{
		"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default"},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := n.api.Do(n.ctx, "POST", "/api/v1/namespaces/"+namespace+"/configmaps", "", map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "kube-root-ca.crt"},
		"data": map[string]any{"ca.crt": string(ca)},
	}, nil); err != nil {
		t.Fatal(err)
	}
}

// startPluginPod creates a Pod from the DaemonSet's pod template, its node paths pointed at
// the test's node, and waits until its container runs and the plugin has connected (it logs
// "connected to"); it returns the pod's name.
func (n *deployNode) startPluginPod(t *testing.T) string {
	t.Helper()
	n.pluginGen++
	name := fmt.Sprintf("mountkeeper-%s-%d", n.kube.NodeName(), n.pluginGen)
	var spec map[string]any
	raw, _ := json.Marshal(dig(t, n.template, "spec"))
	text := strings.NewReplacer(
		`"/opt/mountkeeper/bin"`, strconv.Quote(filepath.Join(n.dir, "hookbin")),
		`"--install-dir=/opt/mountkeeper/bin"`, strconv.Quote("--install-dir="+filepath.Join(n.dir, "hookbin")),
		`"--socket=/var/run/nri/nri.sock"`, strconv.Quote("--socket="+n.ctrd.NRISocket()),
		// The init container writes containerd's config in the host's mount namespace
		// (--host-namespaces): the test's containerd's, never this machine's /etc/containerd.
		`"--config-file=/etc/containerd/config.toml"`, strconv.Quote("--config-file="+n.ctrd.ConfigPath()),
		`"--drop-in=/etc/containerd/conf.d/99-mountkeeper.toml"`, strconv.Quote("--drop-in="+filepath.Join(filepath.Dir(n.ctrd.ConfigPath()), "conf.d", "99-mountkeeper.toml")),
	).Replace(string(raw))
	if err := json.Unmarshal([]byte(text), &spec); err != nil {
		t.Fatal(err)
	}
	spec["nodeName"] = n.kube.NodeName()
	hostPID := "--host-namespaces-pid=" + strconv.Itoa(os.Getpid())
	for _, c := range spec["containers"].([]any) {
		c := c.(map[string]any)
		if c["name"] == "mountkeeper" {
			c["args"] = append(c["args"].([]any), hostPID, "--log-level=debug")
		}
	}
	for _, c := range spec["initContainers"].([]any) {
		c := c.(map[string]any)
		if c["name"] == "runtime-configure" {
			c["command"] = append(c["command"].([]any), hostPID)
		}
	}
	meta := map[string]any{"name": name, "labels": dig(t, n.template, "metadata")["labels"]}
	if _, err := n.api.CreatePod(n.ctx, deployNS, map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}); err != nil {
		t.Fatalf("create the plugin pod from the DaemonSet's template: %v", err)
	}
	n.waitRunningIn(t, deployNS, name, 90*time.Second)
	if err := harnessPoll(n.ctx, 30*time.Second, func() error {
		if strings.Contains(n.podLog(name, "mountkeeper"), "connected to") {
			return nil
		}
		return errors.New("the plugin has not connected")
	}); err != nil {
		t.Fatalf("plugin pod %s: %v\n%s", name, err, n.podLog(name, "mountkeeper"))
	}
	return name
}

// checkNodeListener checks the listener the template opens for a cluster Prometheus
// (--metrics-listen=$(NODE_IP):9659): a scrape without a token gets 401; one with a token gets
// 503 within the review timeout, since this node has no route to the API server's service
// address (no kube-proxy): never a hang, never the metrics. TestMetricsAuthorization checks
// the answers with a reachable API server.
func (n *deployNode) checkNodeListener(t *testing.T, plugin string) {
	t.Helper()
	pod, err := n.api.GetPod(n.ctx, deployNS, plugin)
	if err != nil || pod.Status.HostIP == "" {
		t.Fatalf("plugin pod's host IP: %q, %v", pod.Status.HostIP, err)
	}
	if log := n.podLog(plugin, "mountkeeper"); strings.Contains(log, "listener for metrics is off") {
		t.Errorf("the plugin did not open its node listener:\n%s", log)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	url := "https://" + net.JoinHostPort(pod.Status.HostIP, "9659") + "/metrics"
	for _, c := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"some-token", http.StatusServiceUnavailable}} {
		req, _ := http.NewRequestWithContext(n.ctx, "GET", url, nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("scrape %s (token %q): %v\n%s", url, c.token, err, n.podLog(plugin, "mountkeeper"))
			continue
		}
		resp.Body.Close()
		t.Logf("scrape %s with token %q: HTTP %d after %v", url, c.token, resp.StatusCode, time.Since(start).Round(time.Millisecond))
		if resp.StatusCode != c.want {
			t.Errorf("scrape %s with token %q: HTTP %d, want %d", url, c.token, resp.StatusCode, c.want)
		}
	}
}

// deletePluginPod deletes the plugin pod and waits until it is gone.
func (n *deployNode) deletePluginPod(t *testing.T, name string) {
	t.Helper()
	if err := n.api.DeletePod(n.ctx, deployNS, name, 5); err != nil {
		t.Fatal(err)
	}
	if err := harnessPoll(n.ctx, 60*time.Second, func() error {
		if _, err := n.api.GetPod(n.ctx, deployNS, name); !harness.IsNotFound(err) {
			return fmt.Errorf("plugin pod %s still there (%v)", name, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// runPod creates a pod in default and waits until its container runs (retrying through
// refusals, which kubelet retries); it returns the container's CRI ID.
func (n *deployNode) runPod(t *testing.T, name, class, script string, privileged bool, volumes, mounts []any) string {
	t.Helper()
	p := n.podManifest(podSpec{name: name, runtimeClass: class, script: script, volumes: volumes, mounts: mounts})
	if privileged {
		p["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["securityContext"] = map[string]any{"privileged": true}
	}
	if _, err := n.api.CreatePod(n.ctx, "default", p); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return n.waitRunning(t, name, 90*time.Second)
}

func (n *deployNode) waitRunning(t *testing.T, name string, timeout time.Duration) string {
	t.Helper()
	return n.waitRunningIn(t, "default", name, timeout)
}

func (n *deployNode) waitRunningIn(t *testing.T, ns, name string, timeout time.Duration) string {
	t.Helper()
	pod, err := n.api.WaitPod(n.ctx, ns, name, timeout, func(p *harness.Pod) error {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running != nil {
				return nil
			}
		}
		return fmt.Errorf("not running: %s", statusText(p))
	})
	if err != nil {
		t.Fatalf("%v\nevents: %s", err, n.eventsText(ns, name))
	}
	return strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
}

func (n *deployNode) execer(id string) harness.Execer {
	return func(ctx context.Context, cmd ...string) (string, string, int, error) {
		return n.ctrd.CRI().Exec(ctx, id, cmd...)
	}
}

// podLog returns what kubelet logged of a container of a pod in deployNS (every run).
func (n *deployNode) podLog(pod, container string) string {
	files, _ := filepath.Glob(filepath.Join(n.kube.PodLogsDir(), deployNS+"_"+pod+"_*", container, "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}

func (n *deployNode) eventsText(ns, name string) string {
	evs, err := n.api.Events(n.ctx, ns, name)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "[%s %s] %s\n", e.Type, e.Reason, e.Message)
	}
	return b.String()
}

// sshfsMount returns the host mount point of the sshfs export and the PID of its FUSE daemon.
func (n *deployNode) sshfsMount(t *testing.T) (string, int) {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var point string
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, " - fuse.sshfs ") && strings.Contains(line, n.sshd.Export()) {
			point = strings.Fields(line)[4]
		}
	}
	if point == "" {
		t.Fatalf("no sshfs mount of %s on the host", n.sshd.Export())
	}
	return point, findPID(t, "sshfs", n.sshd.Export())
}

// pluginPID is the PID of the running plugin (after its re-exec into the host's namespaces).
func (n *deployNode) pluginPID(t *testing.T) int {
	t.Helper()
	return findPID(t, "mountkeeper", "nri", "--socket="+n.ctrd.NRISocket())
}

// findPID returns the PID of the one process whose command line contains all words.
func findPID(t *testing.T, words ...string) int {
	t.Helper()
	var found []int
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		cmd, err := os.ReadFile(p)
		if err != nil || !containsAllWords(string(cmd), words) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		found = append(found, pid)
	}
	if len(found) != 1 {
		t.Fatalf("processes with %q in their command line: %v, want one", words, found)
	}
	return found[0]
}

func containsAllWords(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// cgroupOf returns the cgroup2 path of a process.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest
		}
	}
	return ""
}

// cgroupV1Paths lists a process's cgroup v1 memberships (hierarchy:path).
func cgroupV1Paths(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var v1 []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(line, "0::") {
			v1 = append(v1, line)
		}
	}
	return strings.Join(v1, " ")
}

func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// countLog counts "ok" and "FAIL" lines of a reader's log.
func countLog(t *testing.T, path string) (ok, fails int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		switch l {
		case "ok":
			ok++
		case "FAIL":
			fails++
		}
	}
	return ok, fails
}

// statusText is a pod's phase and container states, for messages and for finding a refusal.
func statusText(p *harness.Pod) string {
	b, _ := json.Marshal(p.Status)
	return string(b)
}

// dig walks nested maps.
func dig(t testing.TB, obj map[string]any, keys ...string) map[string]any {
	t.Helper()
	cur := obj
	for _, k := range keys {
		next, ok := cur[k].(map[string]any)
		if !ok {
			t.Fatalf("no map at %q in %v", k, keys)
		}
		cur = next
	}
	return cur
}
