//go:build e2e

package e2e

import (
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

	"github.com/moby/sys/mountinfo"
	"go.yaml.in/yaml/v3"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// deployDir holds the shipped manifests.
var deployDir = func() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", "deploy")
}()

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
		// (--host-namespaces): the test's containerd's, never this machine's /etc/containerd
		// (the distribution's default, which the chart leaves to the command).
		`"--distribution=auto"`, `"--distribution=auto",`+strconv.Quote("--config-file="+n.ctrd.ConfigPath())+","+
			strconv.Quote("--drop-in="+filepath.Join(filepath.Dir(n.ctrd.ConfigPath()), "conf.d", "99-mountkeeper.toml")),
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
		if c["name"] == "node-label" {
			// The API server's own address: this node has no route to its service address.
			c["args"] = append(c["args"].([]any), hostPID, "--cri-socket="+n.ctrd.Socket(), "--interval=1s", "--kube-api="+n.kube.APIURL())
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
	if class != "" {
		n.waitClassNode(t, class)
	}
	if _, err := n.api.CreatePod(n.ctx, "default", p); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return n.waitRunning(t, name, 90*time.Second)
}

// waitClassNode waits (bounded) until the node has the labels the RuntimeClass class selects
// (the chart's node label, set once the running containerd reports the class's handler): a
// pod bound to the node by nodeName before that is refused by kubelet (NodeAffinity), not
// left Pending as the scheduler would leave it.
func (n *deployNode) waitClassNode(t *testing.T, class string) {
	t.Helper()
	var rc struct {
		Scheduling struct {
			NodeSelector map[string]string `json:"nodeSelector"`
		} `json:"scheduling"`
	}
	if err := n.api.Do(n.ctx, "GET", "/apis/node.k8s.io/v1/runtimeclasses/"+class, "", nil, &rc); err != nil || len(rc.Scheduling.NodeSelector) == 0 {
		return
	}
	if err := harnessPoll(n.ctx, 60*time.Second, func() error {
		var node struct{ Metadata harness.ObjectMeta }
		if err := n.api.Do(n.ctx, "GET", "/api/v1/nodes/"+n.kube.NodeName(), "", nil, &node); err != nil {
			return err
		}
		for k, v := range rc.Scheduling.NodeSelector {
			if node.Metadata.Labels[k] != v {
				return fmt.Errorf("node %s lacks %s=%s, which RuntimeClass %s selects (labels %v)", n.kube.NodeName(), k, v, class, node.Metadata.Labels)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
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

// eventsTextLines are a pod's events as `kubectl describe pod` lists them: type, reason,
// message.
func (n *deployNode) eventsTextLines(ns, name string) []string {
	return strings.Split(strings.TrimSpace(n.eventsText(ns, name)), "\n")
}

// sshfsMount returns the host mount point of the sshfs export and the PID of its FUSE daemon.
func (n *deployNode) sshfsMount(t *testing.T) (string, int) {
	t.Helper()
	ms, err := testsupport.Mounts(0, func(m *mountinfo.Info) (skip, stop bool) {
		return m.FSType != "fuse.sshfs" || !strings.Contains(m.Source, n.sshd.Export()), false
	})
	if err != nil {
		t.Fatal(err)
	}
	var point string
	if len(ms) > 0 {
		point = ms[len(ms)-1].Mountpoint
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

// statusText is a pod's phase and container states, for messages and for finding a refusal.
func statusText(p *harness.Pod) string {
	b, _ := json.Marshal(p.Status)
	return string(b)
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
