//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

// pinnedHelm is the helm test/tools/install-helm.sh builds into the cache.
func pinnedHelm() string {
	return filepath.Join(cmp.Or(os.Getenv("MOUNTKEEPER_BIN"), "/var/cache/mountkeeper-test/bin"), "helm")
}

// runHelm runs helm against kubeconfig's cluster with a home of its own and returns its
// output; a failure fails the test.
func runHelm(t *testing.T, ctx context.Context, helmBin, kubeconfig string, args ...string) string {
	t.Helper()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, helmBin, append(args, "--kubeconfig", kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// helmClass is one class of helmValues with a bind of DIR/src/helm/<dst> at /<dst>, each.
func helmClass(name string, dsts ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    mounts:\n", name)
	for _, d := range dsts {
		fmt.Fprintf(&b, "      - {source: DIR/src/helm/%s, destination: /%s, readOnly: true}\n", d, d)
	}
	return b.String()
}

// chartRBAC are the API paths of the agent's ServiceAccount and the ClusterRoles and binding
// the chart renders for the node listener, release mountkeeper.
var chartRBAC = []string{
	"/api/v1/namespaces/" + deployNS + "/serviceaccounts/mountkeeper",
	"/apis/rbac.authorization.k8s.io/v1/clusterroles/mountkeeper-auth-reviewer",
	"/apis/rbac.authorization.k8s.io/v1/clusterroles/mountkeeper-metrics-reader",
	"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/mountkeeper-auth-reviewer",
}

// checkChartObjects reads what the chart created through the API: the ConfigMap's config
// loads and has classes, one RuntimeClass per class (handler = name), and the DaemonSet's
// containers name localhost/mountkeeper:tag; the DaemonSet becomes n.template.
func (n *deployNode) checkChartObjects(t *testing.T, tag string, classes []string) {
	t.Helper()
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := n.api.Do(n.ctx, "GET", "/api/v1/namespaces/"+deployNS+"/configmaps/mountkeeper-config", "", nil, &cm); err != nil {
		t.Fatal(err)
	}
	config, err := configs.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the chart's config does not load: %v\n%s", err, cm.Data["config.yaml"])
	}
	if got := config.ClassNames(); strings.Join(got, ",") != strings.Join(classes, ",") {
		t.Errorf("the chart's config has classes %v, want %v", got, classes)
	}
	for _, c := range classes {
		var rc struct {
			Handler string `json:"handler"`
		}
		if err := n.api.Do(n.ctx, "GET", "/apis/node.k8s.io/v1/runtimeclasses/"+c, "", nil, &rc); err != nil {
			t.Errorf("RuntimeClass %s: %v", c, err)
		} else if rc.Handler != c {
			t.Errorf("RuntimeClass %s has handler %q", c, rc.Handler)
		}
	}
	var ds map[string]any
	if err := n.api.Do(n.ctx, "GET", "/apis/apps/v1/namespaces/"+deployNS+"/daemonsets/mountkeeper", "", nil, &ds); err != nil {
		t.Fatal(err)
	}
	n.template = dig(t, ds, "spec", "template")
	if image := n.templateImage(); image != harness.AgentImageRepository+":"+tag {
		t.Errorf("the DaemonSet names image %s, want tag %s", image, tag)
	}
}

// waitAgentPod waits for the agent's pod (made by the DaemonSet controller) to run and
// connect, and returns its name.
func (n *deployNode) waitAgentPod(t *testing.T) string {
	t.Helper()
	var name string
	if err := harnessPoll(n.ctx, 2*time.Minute, func() error {
		pods, err := n.api.ListPods(n.ctx, deployNS)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if p.Metadata.Labels["app.kubernetes.io/name"] == "mountkeeper" && p.Metadata.Labels["app.kubernetes.io/component"] == "" {
				for _, c := range p.Status.ContainerStatuses {
					if c.State.Running != nil {
						name = p.Metadata.Name
						return nil
					}
				}
				return fmt.Errorf("agent pod %s: %s", p.Metadata.Name, statusText(&p))
			}
		}
		return errors.New("no agent pod yet")
	}); err != nil {
		t.Fatal(err)
	}
	n.waitConnected(t, name, 1)
	return name
}

// waitConnected waits until the agent pod's log says "connected to" times times.
func (n *deployNode) waitConnected(t *testing.T, pod string, times int) {
	t.Helper()
	if err := harnessPoll(n.ctx, 60*time.Second, func() error {
		if strings.Count(n.podLog(pod, "mountkeeper"), "connected to") >= times {
			return nil
		}
		return errors.New("the plugin has not connected")
	}); err != nil {
		t.Fatalf("agent pod %s: %v\n%s", pod, err, n.podLog(pod, "mountkeeper"))
	}
}

// helmSnapshot is an uninstallSnapshot of a kube node with the chart installed: containerd's
// config, its conf.d and the install directory, each file and directory (content digest,
// mode), the scopes of the network mounts of keys, the
// state directory, the mounts below the test's directory, and the processes of the agent and
// the uninstall (their command lines name the node's paths or mountkeeper).
func (n *deployNode) helmSnapshot(configDir string, keys []string) uninstallSnapshot {
	t := n.t
	t.Helper()
	s := uninstallSnapshot{Files: map[string]string{}}
	for _, dir := range []string{n.ctrd.ConfigPath(), filepath.Join(configDir, "conf.d"), filepath.Join(n.dir, "hookbin")} {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			v := info.Mode().String()
			if info.Mode().IsRegular() {
				data, _ := os.ReadFile(p)
				v += fmt.Sprintf(" %x", sha256.Sum256(data))
			}
			s.Files[p] = v
			return nil
		})
	}
	_, err := os.Stat(filepath.Join(n.dir, "state"))
	s.StateDir = err == nil
	s.Cgroups = scopeCgroups(t, keys)
	for _, m := range hostMounts(t, n.dir) {
		s.Mounts = append(s.Mounts, fmt.Sprintf("%d %s %s", m.ID, m.Root, m.Mountpoint))
	}
	out, err := exec.Command("ps", "-eo", "pid=,args=").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, n.dir) || strings.Contains(line, "/usr/local/bin/mountkeeper") || strings.Contains(line, "mountkeeper-") && strings.Contains(line, "host-namespaces") {
			s.Procs = append(s.Procs, strings.TrimSpace(line))
		}
	}
	return s
}

// importVersionImage builds the image of this tree with mountkeeper stamped tag (its version)
// and imports it as localhost/mountkeeper:tag.
func (n *deployNode) importVersionImage(t *testing.T, tag string) {
	t.Helper()
	dir := filepath.Join(n.dir, "image-"+tag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := harness.BuildMountkeeperVersion(dir, tag)
	if err != nil {
		t.Fatal(err)
	}
	hook, err := harness.BuildHook(dir)
	if err != nil {
		t.Fatal(err)
	}
	runtime, err := harness.BuildRuntimeWrapper(dir)
	if err != nil {
		t.Fatal(err)
	}
	var data [3][]byte
	for i, p := range []string{bin, hook, runtime} {
		if data[i], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	image := harness.AgentImageRepository + ":" + tag
	archive, err := harness.AgentImageArchive(data[0], data[1], data[2], image)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.ctrd.ImportImage(n.ctx, path, image); err != nil {
		t.Fatal(err)
	}
}

// rolloutState is what the test reads of the DaemonSet and its pods.
type rolloutState struct {
	Metadata struct {
		Generation int64 `json:"generation"`
	} `json:"metadata"`
	Status struct {
		ObservedGeneration     int64 `json:"observedGeneration"`
		DesiredNumberScheduled int   `json:"desiredNumberScheduled"`
		UpdatedNumberScheduled int   `json:"updatedNumberScheduled"`
		NumberAvailable        int   `json:"numberAvailable"`
	} `json:"status"`
}

// waitRollout waits until the DaemonSet's rollout is complete (every pod from the current
// template, available: ready, i.e. connected to the runtime) and its one pod runs image
// localhost/mountkeeper:tag and logged its connection; it returns that pod's name.
func (n *deployNode) waitRollout(t *testing.T, tag string, timeout time.Duration) string {
	t.Helper()
	var name string
	err := harnessPoll(n.ctx, timeout, func() error {
		var ds rolloutState
		if err := n.api.Do(n.ctx, "GET", "/apis/apps/v1/namespaces/"+deployNS+"/daemonsets/mountkeeper", "", nil, &ds); err != nil {
			return err
		}
		s := ds.Status
		if s.ObservedGeneration < ds.Metadata.Generation || s.DesiredNumberScheduled != 1 || s.UpdatedNumberScheduled != 1 || s.NumberAvailable != 1 {
			return fmt.Errorf("DaemonSet status %+v at generation %d", s, ds.Metadata.Generation)
		}
		var pods struct {
			Items []struct {
				Metadata struct {
					Name              string  `json:"name"`
					DeletionTimestamp *string `json:"deletionTimestamp"`
				} `json:"metadata"`
				Spec struct {
					Containers []struct {
						Image string `json:"image"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"items"`
		}
		if err := n.api.Do(n.ctx, "GET", "/api/v1/namespaces/"+deployNS+"/pods", "", nil, &pods); err != nil {
			return err
		}
		if len(pods.Items) != 1 || pods.Items[0].Metadata.DeletionTimestamp != nil {
			return fmt.Errorf("%d agent pods, want one not terminating", len(pods.Items))
		}
		p := pods.Items[0]
		if img := p.Spec.Containers[0].Image; img != harness.AgentImageRepository+":"+tag {
			return fmt.Errorf("agent pod %s runs %s", p.Metadata.Name, img)
		}
		if !strings.Contains(n.podLog(p.Metadata.Name, "mountkeeper"), "connected to") {
			return fmt.Errorf("agent pod %s has not connected", p.Metadata.Name)
		}
		name = p.Metadata.Name
		return nil
	})
	if err != nil {
		t.Fatalf("rollout of %s: %v\ncontroller-manager log:\n%s", tag, err, tailFile(n.kube.LogPath("kube-controller-manager"), 3000))
	}
	return name
}

// waitPodLeaving waits until the agent pod is being deleted (or gone).
func (n *deployNode) waitPodLeaving(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	err := harnessPoll(n.ctx, timeout, func() error {
		var p struct {
			Metadata struct {
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
		}
		err := n.api.Do(n.ctx, "GET", "/api/v1/namespaces/"+deployNS+"/pods/"+name, "", nil, &p)
		if harness.IsNotFound(err) || (err == nil && p.Metadata.DeletionTimestamp != nil) {
			return nil
		}
		return errors.Join(err, fmt.Errorf("agent pod %s not deleted yet", name))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// connectedAt is when agent pod's newest run logged its connection to the runtime (the CRI
// log's timestamp): from then on it is ready (/readyz).
func (n *deployNode) connectedAt(t *testing.T, pod string) time.Time {
	t.Helper()
	var at time.Time
	for _, line := range strings.Split(n.podLog(pod, "mountkeeper"), "\n") {
		if !strings.Contains(line, "connected to") {
			continue
		}
		ts, _, _ := strings.Cut(line, " ")
		parsed, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t.Fatalf("agent pod %s's log line %q: %v", pod, line, err)
		}
		if parsed.After(at) {
			at = parsed
		}
	}
	if at.IsZero() {
		t.Fatalf("agent pod %s logged no connection", pod)
	}
	return at
}

// metricsServerName is the DNS name of the node listener's certificate in TestHelmRollout.
const metricsServerName = "mountkeeper-metrics.test"

// selfSignedPair returns a self-signed server certificate for name and its key, PEM.
func selfSignedPair(t *testing.T, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// checkListenerCertificate connects to the agent pod's node listener as a scraper that trusts
// only certPEM and checks the name in it: the handshake succeeds only if the agent serves the
// Secret's certificate (its default is self-signed per start), and a scrape without a token
// gets 401.
func (n *deployNode) checkListenerCertificate(t *testing.T, plugin string, certPEM []byte) {
	t.Helper()
	pod, err := n.api.GetPod(n.ctx, deployNS, plugin)
	if err != nil || pod.Status.HostIP == "" {
		t.Fatalf("agent pod's host IP: %q, %v", pod.Status.HostIP, err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: metricsServerName}, DisableKeepAlives: true}}
	url := "https://" + net.JoinHostPort(pod.Status.HostIP, "9659") + "/metrics"
	resp, err := client.Get(url)
	if err != nil {
		t.Errorf("node listener of %s with the Secret's certificate: %v\n%s", plugin, err, n.podLog(plugin, "mountkeeper"))
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("scrape %s without a token: HTTP %d, want 401", url, resp.StatusCode)
	}
}

// agentTemplate is the agent DaemonSet's pod template's image and runtime-config checksum.
func agentTemplate(t *testing.T, ctx context.Context, n *deployNode) agentTemplateInfo {
	t.Helper()
	var ds struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec struct {
					Containers []struct{ Name, Image string } `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := n.api.Do(ctx, "GET", "/apis/apps/v1/namespaces/"+deployNS+"/daemonsets/mountkeeper", "", nil, &ds); err != nil {
		t.Fatal(err)
	}
	info := agentTemplateInfo{checksum: ds.Spec.Template.Metadata.Annotations["mountkeeper.io/runtime-config"]}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "mountkeeper" {
			info.image = c.Image
		}
	}
	return info
}
