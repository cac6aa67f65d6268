//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// kubeNode is a test's real Kubernetes node: a private containerd with NRI, etcd,
// kube-apiserver and kubelet on it, and the mountkeeper plugin (restartable with another
// config).
type kubeNode struct {
	t      testing.TB
	ctx    context.Context
	dir    string // host side: sources, hostPath volumes, plugin config
	bin    string
	ctrd   *harness.Containerd
	kube   *harness.KubeNode
	api    *harness.KubeClient
	plugin *harness.Plugin
	scopes *scopeEnder // network mount scopes that end with the test
	// pluginLog receives the plugin's log; nil: the test's log.
	pluginLog io.Writer
}

// kubeClassConfig is the plugin config of the kube tests: one class whose handler the
// harness containerd declares, and the kubelet root of the node. KUBELET, SRC and REPAIR are
// replaced.
const kubeClassConfig = `
kubeletRoot: KUBELET
stateDir: SRC/state
subPathRepair: REPAIR
runtimeClasses:
  mk-kube:
    mounts:
      - {source: SRC/class, destination: /class, propagation: None, readOnly: true}
`

// newKubeNode starts containerd (handler mk-kube, NRI on) and a KubeNode on it. The plugin is
// not started: see startPlugin. Everything is torn down when the test ends, passed or not.
func newKubeNode(t testing.TB, ctx context.Context, opts harness.KubeOptions) *kubeNode {
	t.Helper()
	return newKubeNodeWith(t, ctx, opts, []string{"mk-kube"})
}

// newKubeNodeWith is newKubeNode with these containerd runtime handlers, each with a
// RuntimeClass of the same name.
func newKubeNodeWith(t testing.TB, ctx context.Context, opts harness.KubeOptions, handlers []string) *kubeNode {
	t.Helper()
	return newKubeNodeCtrd(t, ctx, opts, handlers, harness.Options{})
}

// newKubeNodeCtrd is newKubeNodeWith with more containerd options (Handlers and NRI are set).
func newKubeNodeCtrd(t testing.TB, ctx context.Context, opts harness.KubeOptions, handlers []string, copts harness.Options) *kubeNode {
	t.Helper()
	testenv.Require(t, "root")
	if why := harness.KubeMissing(opts); why != "" {
		testenv.Skip(t, "no Kubernetes node: %s", why)
	}
	n := prepareKubeNode(t, ctx)
	copts.Handlers, copts.NRI = handlers, true
	n.startKube(copts, opts, handlers)
	return n
}

// prepareKubeNode makes a kubeNode's work directory, with the mountkeeper binary and the
// class mount's source (src/class/marker); nothing runs yet.
func prepareKubeNode(t testing.TB, ctx context.Context) *kubeNode {
	t.Helper()
	n := &kubeNode{t: t, ctx: ctx, dir: harness.WorkDir(t, "mk-e2e-")}
	// Before containerd and kubelet start: the scopes end once they (and a plugin pod) are
	// gone, and before the work directory is removed.
	n.scopes = newScopeEnder(t)
	var err error
	if n.bin, err = harness.BuildMountkeeper(n.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(n.dir, "src", "class"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "src", "class", "marker"), []byte("from-class\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// startKube starts containerd with copts and a KubeNode on it with opts, both torn down when
// the test ends (their logs shown if it failed), and a RuntimeClass of the same name for each
// of handlers.
func (n *kubeNode) startKube(copts harness.Options, opts harness.KubeOptions, handlers []string) {
	t, ctx := n.t, n.ctx
	t.Helper()
	var err error
	n.ctrd, err = harness.Start(ctx, copts)
	t.Cleanup(func() {
		if t.Failed() && n.ctrd != nil {
			if log, err := os.ReadFile(n.ctrd.LogPath()); err == nil {
				t.Logf("containerd log (last 4 KiB):\n%s", lastBytes(log, 4096))
			}
		}
		if err := n.ctrd.Close(); err != nil {
			t.Errorf("cleanup containerd: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	n.kube, err = harness.StartKubeNode(ctx, n.ctrd, opts)
	t.Cleanup(func() {
		if t.Failed() && n.kube != nil {
			if log, err := os.ReadFile(n.kube.LogPath("kubelet")); err == nil {
				t.Logf("kubelet log (last 6 KiB):\n%s", lastBytes(log, 6144))
			}
		}
		if err := n.kube.Close(); err != nil {
			t.Errorf("cleanup Kubernetes node: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("start Kubernetes node: %v", err)
	}
	n.api = n.kube.API()
	for _, h := range handlers {
		if err := n.api.CreateRuntimeClass(ctx, h, h); err != nil {
			t.Fatal(err)
		}
	}
}

// startPlugin (re)starts mountkeeper with kubeClassConfig and subPathRepair as given.
func (n *kubeNode) startPlugin(repair bool) {
	n.t.Helper()
	n.startPluginWith(strings.ReplaceAll(kubeClassConfig, "REPAIR", strconv.FormatBool(repair)))
}

// writeConfig writes the plugin config template (KUBELET and SRC replaced, as in
// kubeClassConfig) and returns its path.
func (n *kubeNode) writeConfig(template string) string {
	n.t.Helper()
	config := filepath.Join(n.dir, "config.yaml")
	text := strings.NewReplacer("KUBELET", n.kube.RootDir(), "SRC", filepath.Join(n.dir, "src")).Replace(template)
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		n.t.Fatal(err)
	}
	return config
}

// startPluginWith (re)starts mountkeeper with the config template (see writeConfig).
func (n *kubeNode) startPluginWith(template string) {
	n.t.Helper()
	if n.plugin != nil {
		n.plugin.Stop()
	}
	config := n.writeConfig(template)
	var log io.Writer = testWriter{n.t, "mountkeeper"}
	if n.pluginLog != nil {
		log = n.pluginLog
	}
	var err error
	n.plugin, err = harness.StartPlugin(n.ctx, harness.PluginOptions{Binary: n.bin, Config: config,
		Socket: n.ctrd.NRISocket(), Log: log})
	if err != nil {
		n.t.Fatalf("start mountkeeper: %v", err)
	}
	n.t.Cleanup(n.plugin.Stop)
}

// podSpec is a busybox pod on the node: host network, no scheduler, no pulls, no token.
type podSpec struct {
	name, runtimeClass, script string
	restartPolicy              string // default Always
	annotations                map[string]string
	volumes, mounts            []any
	grace                      int
}

func (n *kubeNode) podManifest(p podSpec) map[string]any {
	spec := map[string]any{
		"nodeName":                      n.kube.NodeName(),
		"hostNetwork":                   true,
		"automountServiceAccountToken":  false,
		"terminationGracePeriodSeconds": p.grace,
		"restartPolicy":                 cmp.Or(p.restartPolicy, "Always"),
		"containers": []any{map[string]any{
			"name":            "c",
			"image":           harness.BusyboxImage,
			"imagePullPolicy": "Never",
			"command":         []string{"sh", "-c", p.script},
			"volumeMounts":    p.mounts,
		}},
		"volumes": p.volumes,
	}
	if p.runtimeClass != "" {
		spec["runtimeClassName"] = p.runtimeClass
	}
	metadata := map[string]any{"name": p.name}
	if p.annotations != nil {
		metadata["annotations"] = p.annotations
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": metadata,
		"spec":     spec,
	}
}

// runningContainer creates a pod and waits until its container runs; it returns the CRI
// container ID.
func (n *kubeNode) runningContainer(p podSpec) string {
	n.t.Helper()
	return n.runningContainerWith(p, nil)
}

// runningContainerWith is runningContainer with edit, if not nil, applied to the pod's spec.
func (n *kubeNode) runningContainerWith(p podSpec, edit func(spec map[string]any)) string {
	n.t.Helper()
	m := n.podManifest(p)
	if edit != nil {
		edit(m["spec"].(map[string]any))
	}
	if _, err := n.api.CreatePod(n.ctx, "default", m); err != nil {
		n.t.Fatalf("create pod %s: %v", p.name, err)
	}
	pod, err := n.api.WaitPod(n.ctx, "default", p.name, 90*time.Second, func(pod *harness.Pod) error {
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.State.Running != nil {
				return nil
			}
			if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
				return fmt.Errorf("container waiting: %s: %s", w.Reason, w.Message)
			}
		}
		return fmt.Errorf("phase %s, no running container", pod.Status.Phase)
	})
	if err != nil {
		n.t.Fatal(err)
	}
	id := pod.Status.ContainerStatuses[0].ContainerID
	return strings.TrimPrefix(id, "containerd://")
}

// raceResult counts one half of TestKubeletSubPathRace.
type raceResult struct {
	enoent     int    // starts that failed in runc with ENOENT on a volume-subpaths bind
	runs       int    // runs that started and appended a line
	readENOENT int    // runs that started but could not read the file
	firstError string // the first ENOENT start error
}

func (r raceResult) starts() int { return r.enoent + r.runs }

// isSubPathENOENT reports whether a start error is runc failing to mount a kubelet subPath
// bind that no longer exists.
func isSubPathENOENT(msg string) bool {
	return strings.Contains(msg, "volume-subpaths") && strings.Contains(msg, "no such file or directory")
}

// startNodeNetwork starts a node network (harness.NodeNetwork) that ends with the test, after
// the node's cleanups (registered later, they run first); it returns it and its directory.
func startNodeNetwork(t *testing.T, ctx context.Context) (*harness.NodeNetwork, string) {
	t.Helper()
	netDir := harness.WorkDir(t, "mk-net-")
	network, err := harness.StartNodeNetwork(ctx, netDir)
	t.Cleanup(func() { network.Close() })
	if err != nil {
		t.Fatal(err)
	}
	return network, netDir
}

// waitNodeReady waits until the node reports Ready (CNI up, runtime ready).
func waitNodeReady(ctx context.Context, api *harness.KubeClient, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		var node struct {
			Status struct {
				Conditions []struct{ Type, Status, Reason, Message string }
			}
		}
		err := api.Do(ctx, "GET", "/api/v1/nodes/"+name, "", nil, &node)
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == "Ready" {
					if c.Status == "True" {
						return nil
					}
					last = c.Reason + ": " + c.Message
				}
			}
		} else {
			last = err.Error()
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("node %s not Ready after %v: %s", name, timeout, last)
}

// cniBinDir is where Debian's containernetworking-plugins installs the CNI plugins.
const cniBinDir = "/usr/lib/cni"

// podNetwork writes into dir a CNI conflist for a bridge of the test's own (no gateway, no
// masquerading, host-local addresses of a link-local /24 kept in dir) plus loopback, and
// removes the bridge and any link still attached to it when the test ends. It returns the
// conf dir.
func podNetwork(t *testing.T, dir string) string {
	t.Helper()
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			testenv.Skip(t, "CNI plugin %s: %v (apt-get install containernetworking-plugins, or run test/tools/install.sh)", p, err)
		}
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Skip(t, "ip: %v (apt-get install iproute2)", err)
	}
	bridge := fmt.Sprintf("mkuns%d", os.Getpid()%1000000)
	conf := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	list := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "mk-userns",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": bridge, "isGateway": false, "ipMasq": false,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  []any{[]any{map[string]any{"subnet": "169.254.77.0/24"}}},
					"dataDir": filepath.Join(dir, "ipam"),
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "10-mk-userns.conflist"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	// libcni keeps its result cache in /var/lib/cni: remove what this test created, if empty.
	var cacheDirs []string
	for _, d := range []string{"/var/lib/cni", "/var/lib/cni/results"} {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			cacheDirs = append([]string{d}, cacheDirs...)
		}
	}
	t.Cleanup(func() {
		for _, d := range cacheDirs {
			_ = os.Remove(d)
		}
		// Normally containerd's CNI DEL has removed the pods' veths with their namespaces.
		out, _ := exec.Command("ip", "-o", "link", "show", "master", bridge).Output()
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
				if o, err := exec.Command("ip", "link", "delete", name).CombinedOutput(); err != nil {
					t.Errorf("cleanup: delete link %s: %v: %s", name, err, o)
				}
			}
		}
		if exec.Command("ip", "link", "show", bridge).Run() == nil {
			if o, err := exec.Command("ip", "link", "delete", bridge).CombinedOutput(); err != nil {
				t.Errorf("cleanup: delete bridge %s: %v: %s", bridge, err, o)
			}
		}
	})
	return conf
}

// apiClient trusts the test API server's CA and sends no client certificate.
func apiClient(t *testing.T, k *harness.KubeNode) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(k.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("no certificate in %s", k.CAFile())
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// subPathRace runs one half of TestKubeletSubPathRace with pods and a configMap named after
// phase for duration, or until its pods' status has shown enough ENOENT start failures
// (enough 0: the whole duration), and removes them afterwards.
func (n *kubeNode) subPathRace(phase string, duration time.Duration, enough int) raceResult {
	t := n.t
	t.Helper()
	ctx := n.ctx
	runs := filepath.Join(n.dir, "runs-"+phase)
	if err := os.MkdirAll(runs, 0o755); err != nil {
		t.Fatal(err)
	}
	logOffset := fileSize(n.ctrd.LogPath())
	cm := "race-" + phase
	if err := n.api.CreateConfigMap(ctx, "default", cm, map[string]string{"value": "v0"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range racePods {
		name := fmt.Sprintf("race-%s-%d", phase, i)
		names = append(names, name)
		p := podSpec{
			name: name,
			script: fmt.Sprintf(`v=$(cat /etc/race/value 2>/dev/null) || v=ENOENT; echo "$v" >>/runs/%s; sleep 0.5`,
				name),
			volumes: []any{
				map[string]any{"name": "cfg", "configMap": map[string]any{"name": cm}},
				map[string]any{"name": "runs", "hostPath": map[string]any{"path": runs, "type": "Directory"}},
			},
			mounts: []any{
				map[string]any{"name": "cfg", "mountPath": "/etc/race/value", "subPath": "value"},
				map[string]any{"name": "runs", "mountPath": "/runs"},
			},
		}
		if _, err := n.api.CreatePod(ctx, "default", n.podManifest(p)); err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
	}
	// Patch the configMap every second for duration, while watching the pods' status for
	// start errors (a cross-check of containerd's log, which is what is counted).
	seen := map[string]string{} // container ID -> message of an ENOENT start failure
	deadline := time.Now().Add(duration)
	nextPatch := time.Now()
	for version := 1; time.Now().Before(deadline) && (enough == 0 || len(seen) < enough); {
		if !time.Now().Before(nextPatch) {
			if err := n.api.PatchConfigMap(ctx, "default", cm, map[string]string{"value": "v" + strconv.Itoa(version)}); err != nil {
				t.Fatalf("patch configMap %s: %v", cm, err)
			}
			version++
			nextPatch = nextPatch.Add(time.Second)
		}
		for _, name := range names {
			pod, err := n.api.GetPod(ctx, "default", name)
			if err != nil {
				t.Fatalf("get pod %s: %v", name, err)
			}
			for _, cs := range pod.Status.ContainerStatuses {
				if tm := cs.LastState.Terminated; tm != nil && isSubPathENOENT(tm.Message) {
					seen[tm.ContainerID] = tm.Message
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("%s: %v", phase, err)
	}
	for _, name := range names {
		if err := n.api.DeletePod(ctx, "default", name, 0); err != nil {
			t.Errorf("delete pod %s: %v", name, err)
		}
	}
	// Wait until kubelet has torn the pods down, so that nothing of this half runs on into
	// the next one, then count.
	err := harnessPoll(ctx, 90*time.Second, func() error {
		pods, err := n.api.ListPods(ctx, "default")
		if err != nil {
			return err
		}
		for _, p := range pods {
			if strings.HasPrefix(p.Metadata.Name, "race-"+phase+"-") {
				return fmt.Errorf("pod %s still exists", p.Metadata.Name)
			}
		}
		entries, _ := os.ReadDir(filepath.Join(n.kube.RootDir(), "pods"))
		if len(entries) > 0 {
			return fmt.Errorf("%d pod directories left in kubelet's root", len(entries))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: pods not torn down: %v", phase, err)
	}
	if err := n.api.DeleteConfigMap(ctx, "default", cm); err != nil {
		t.Errorf("delete configMap %s: %v", cm, err)
	}

	var r raceResult
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(runs, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			switch line {
			case "":
			case "ENOENT":
				r.readENOENT++
			default:
				r.runs++
			}
		}
	}
	log, err := os.ReadFile(n.ctrd.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log[min(logOffset, int64(len(log))):]), "\n") {
		if strings.Contains(line, `msg="StartContainer for`) && isSubPathENOENT(line) {
			r.enoent++
			if r.firstError == "" {
				r.firstError = line
			}
		}
	}
	t.Logf("%s: %d ENOENT start failures in containerd's log (%d distinct seen in pod status), %d runs, %d runs that could not read the file",
		phase, r.enoent, len(seen), r.runs, r.readENOENT)
	return r
}
