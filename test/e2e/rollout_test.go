//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// rolloutMidScript is the command of the class pod created while the agent pod is replaced:
// it writes what it found at its own start (its class mount there or not) to /reads, then
// sleeps. A container that started without its mount says so itself, whatever happens later.
const rolloutMidScript = `if grep -q " /data .* - fuse.sshfs " /proc/self/mountinfo && cat /data/hello >/dev/null; then echo mounted; else echo NO-MOUNT; fi > /reads/$POD; exec sleep 3600`

// TestHelmRollout (issue 26 item 1): a real rolling update of the chart's DaemonSet by the
// real kube-controller-manager (DaemonSet controller) and kube-scheduler on the real kubelet
// and containerd, under a pod reading an sshfs class mount every 100 ms. The chart is
// installed with image A (this tree, version stamp e2e-a), `helm upgrade` names image B (the
// same tree stamped e2e-b), then `helm rollback` goes back to A. Each time the DaemonSet
// controller replaces the agent pod (maxUnavailable as the chart sets it: 1) and the test
// checks that the reader saw no failed read, that the new agent (its log names its version)
// adopted the same host mount (mount ID) served by the same FUSE daemon (PID), and that a
// class pod created while the old agent pod was going away was either refused by the guard
// (kubelet retrying until the new agent is up) or got its mount: it never started without it
// (the pod records what it found at its own start). It logs the rollout time, the reads, and
// how long the mid-rollout pod waited. Nothing is pulled: both images are built and imported.
//
// subPaths through the rollout: two pods read a configMap key mounted with subPath (a file)
// and a directory of a configMap volume mounted with subPath, every 10 ms (livereader): one in
// class mk-live (subPathUpdates: live), one of no class (kubelet's subPath, mountkeeper's
// private copy). Once the old agent's process is gone the configMap is patched (kubelet
// nudged to write it at once) and the test waits until kubelet swapped the volumes; after the
// rollout it is patched again. Every read must be whole and of one version, the readers never
// restart, the live pod's subPath mounts are the ones it had until the new agent applies the
// missed update, which it must read, then the later one too (60 s each); the other pod's
// mounts stay untouched and it reads only its first value. Logged: reads, when the gap's swap
// happened against the new agent's connection, and how long after that connection the
// container read it. At the end the other pod's container is restarted after four updates
// (its kubelet bind is stale, kubernetes #68211): it must start and read the newest value.
//
// hostNamespacesPID names the test process: PID 1 of this machine is a sandbox process whose
// namespaces cannot be opened. The uninstall hooks are off: TestHelmUninstall tests them, and
// this node has no service proxy for their waiter.
func TestHelmRollout(t *testing.T) {
	helmBin := pinnedHelm()
	testenv.Require(t, append([]string{helmBin}, sshfsNeeds...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := &deployNode{kubeNode: newKubeNodeWith(t, ctx, harness.KubeOptions{
		ControlPlane: true,
		// A refused start (the guard) is retried every second, not after 10s, 20s, 40s...
		FeatureGates:              map[string]bool{"KubeletCrashLoopBackOffMax": true},
		MaxContainerRestartPeriod: time.Second,
	}, []string{"mk-sshfs", "mk-live"})}
	// The chart owns the classes' RuntimeClasses.
	for _, class := range []string{"mk-sshfs", "mk-live"} {
		if err := n.api.DeleteRuntimeClass(ctx, class); err != nil {
			t.Fatal(err)
		}
	}
	n.sshd = startHelloSSHD(t, harness.WorkDir(t, "mk-rosshd-"))
	reads := filepath.Join(n.dir, "reads")
	if err := os.MkdirAll(reads, 0o755); err != nil {
		t.Fatal(err)
	}

	// Images A and B: two builds of this tree with two version stamps, imported, not pulled.
	for _, tag := range []string{"e2e-a", "e2e-b"} {
		n.importVersionImage(t, tag)
	}

	classMount := map[string]any{
		"type": "fuse.sshfs", "source": "root@127.0.0.1:" + n.sshd.Export(), "destination": "/data",
		"propagation": "HostToContainer", "options": n.sshd.ClientOptions(),
	}
	config := map[string]any{"kubeletRoot": n.kube.RootDir(), "stateDir": filepath.Join(n.dir, "state"), "unmountGrace": "2s"}
	configText, _ := json.Marshal(map[string]any{"kubeletRoot": config["kubeletRoot"], "stateDir": config["stateDir"],
		"runtimeClasses": map[string]any{"mk-sshfs": map[string]any{"mounts": []any{classMount}}}})
	n.scopes.add(t, configText)
	// mk-live has no mount of its own: its pods' subPaths follow updates (the subPath pods).
	classes := []any{map[string]any{"name": "mk-sshfs", "mounts": []any{classMount}},
		map[string]any{"name": "mk-live", "subPathUpdates": "live"}}
	values := func(tag string) string {
		t.Helper()
		v := map[string]any{
			"image":             map[string]any{"tag": tag},
			"hostNamespacesPID": os.Getpid(),
			"uninstall":         map[string]any{"enabled": false},
			"containerd":        map[string]any{"configFile": n.ctrd.ConfigPath(), "dropIn": filepath.Join(filepath.Dir(n.ctrd.ConfigPath()), "conf.d", "99-mountkeeper.toml")},
			"installDir":        filepath.Join(n.dir, "hookbin"),
			"nri":               map[string]any{"socket": n.ctrd.NRISocket()},
			"log":               map[string]any{"level": "debug"},
			"metrics":           map[string]any{"nodeListener": map[string]any{"enabled": true, "port": 9659, "tls": map[string]any{"secretName": "mountkeeper-metrics-tls"}}},
			"runtimeClasses":    classes,
			"config":            config,
		}
		data, _ := json.Marshal(v) // YAML is a superset of JSON
		path := filepath.Join(n.dir, "values-"+tag+".yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	kubeconfig := n.kube.AdminKubeconfig()
	helm := func(args ...string) string {
		t.Helper()
		return runHelm(t, ctx, helmBin, kubeconfig, append(args, "--namespace", deployNS)...)
	}
	chart := filepath.Join(deployDir, "helm", "mountkeeper")
	defer func() {
		// Before the node's cleanup: no DaemonSet controller recreating the agent pod.
		helm("uninstall", "mountkeeper", "--wait", "--timeout", "60s")
		pods, err := n.api.ListPods(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if err := n.api.DeletePod(ctx, p.Metadata.Namespace, p.Metadata.Name, 1); err != nil && !harness.IsNotFound(err) {
				t.Error(err)
			}
		}
		if err := harnessPoll(ctx, 60*time.Second, func() error {
			left, err := n.api.ListPods(ctx, "")
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("%d pods left", len(left))
			}
			return err
		}); err != nil {
			t.Errorf("%v\nkubelet log:\n%s", err, tailFile(n.kube.LogPath("kubelet"), 6000))
		}
	}()

	// The node listener's certificate (metrics.nodeListener.tls.secretName): a Secret made
	// before the install, as cert-manager would.
	// (The controller manager gives it its default ServiceAccount.)
	if err := n.api.Do(ctx, "POST", "/api/v1/namespaces", "", map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": deployNS},
	}, nil); err != nil {
		t.Fatal(err)
	}
	tlsCert, tlsKey := selfSignedPair(t, metricsServerName)
	if err := n.api.Do(ctx, "POST", "/api/v1/namespaces/"+deployNS+"/secrets", "", map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": map[string]any{"name": "mountkeeper-metrics-tls"},
		"stringData": map[string]any{"tls.crt": string(tlsCert), "tls.key": string(tlsKey), "ca.crt": string(tlsCert)},
	}, nil); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	helm("install", "mountkeeper", chart, "--values", values("e2e-a"))
	plugin := n.waitRollout(t, "e2e-a", 120*time.Second)
	t.Logf("helm install: agent pod %s of the DaemonSet connected after %v", plugin, time.Since(start).Round(time.Millisecond))
	n.checkListenerCertificate(t, plugin, tlsCert)
	// The chart's update strategy is what the DaemonSet controller rolls by: one node's agent
	// pod away at a time, no second one beside it.
	var ds struct {
		Spec struct {
			UpdateStrategy struct {
				Type          string `json:"type"`
				RollingUpdate struct {
					MaxUnavailable any `json:"maxUnavailable"`
					MaxSurge       any `json:"maxSurge"`
				} `json:"rollingUpdate"`
			} `json:"updateStrategy"`
		} `json:"spec"`
	}
	if err := n.api.Do(ctx, "GET", "/apis/apps/v1/namespaces/"+deployNS+"/daemonsets/mountkeeper", "", nil, &ds); err != nil {
		t.Fatal(err)
	}
	if u := ds.Spec.UpdateStrategy; u.Type != "RollingUpdate" || fmt.Sprint(u.RollingUpdate.MaxUnavailable) != "1" || fmt.Sprint(u.RollingUpdate.MaxSurge) != "0" {
		t.Errorf("the DaemonSet's update strategy is %+v, want RollingUpdate, maxUnavailable 1, maxSurge 0", u)
	}
	// The init container declared the class's handler; containerd reads it at start.
	if err := n.ctrd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	readerVolumes := []any{map[string]any{"name": "reads", "hostPath": map[string]any{"path": reads, "type": "Directory"}}}
	readerMounts := []any{map[string]any{"name": "reads", "mountPath": "/reads"}}
	n.runPod(t, "sshfs-reader", "mk-sshfs",
		`while true; do if cat /data/hello >/dev/null 2>&1; then echo ok; else echo FAIL; fi >> /reads/log; sleep 0.1; done`,
		false, readerVolumes, readerMounts)
	mountPoint, daemon := n.sshfsMount(t)
	mountID := mountIDAt(t, mountPoint)
	t.Logf("sshfs host mount %s (mount ID %s), FUSE daemon %d", mountPoint, mountID, daemon)
	sub := n.startRolloutSubPaths(t)

	steps := []struct {
		name, tag string
		args      []string
	}{
		{"upgrade to B", "e2e-b", []string{"upgrade", "mountkeeper", chart, "--values", values("e2e-b")}},
		{"rollback to A", "e2e-a", []string{"rollback", "mountkeeper", "1"}},
	}
	for i, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			okBefore, failBefore := countLog(t, filepath.Join(reads, "log"))
			subReadsBefore, _ := sub.reads(t)
			liveMounts, kubeletMounts := sub.mountIDs(t, subPathLive), sub.mountIDs(t, subPathKubelet)
			oldAgent := n.pluginPID(t)
			start := time.Now()
			t.Logf("helm %s:\n%s", s.args[0], helm(s.args...))
			// The DaemonSet controller deletes the old agent pod (maxUnavailable 1, one node):
			// from then on until the new one connects, a class container meets the guard.
			n.waitPodLeaving(t, plugin, 60*time.Second)
			leaving := time.Since(start)
			mid := fmt.Sprintf("mid-rollout-%d", i)
			pod := n.podManifest(podSpec{name: mid, runtimeClass: "mk-sshfs", script: rolloutMidScript, volumes: readerVolumes, mounts: readerMounts})
			c := pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			c["env"] = []any{map[string]any{"name": "POD", "value": mid}}
			created := time.Now()
			if _, err := n.api.CreatePod(ctx, "default", pod); err != nil {
				t.Fatal(err)
			}
			gap := sub.patchInGap(t, oldAgent)
			plugin = n.waitRollout(t, s.tag, 120*time.Second)
			rolled := time.Since(start)
			connected := n.connectedAt(t, plugin)
			id := n.waitRunning(t, mid, 90*time.Second)
			waited := time.Since(created)
			var refusal string
			for _, e := range n.eventsTextLines("default", mid) {
				if strings.Contains(e, "did not handle this container") {
					refusal = e
				}
			}
			data, err := os.ReadFile(filepath.Join(reads, mid))
			if err != nil || strings.TrimSpace(string(data)) != "mounted" {
				t.Errorf("the class pod created during the rollout found at its start: %q (%v), want its sshfs mount", data, err)
			}
			if out, _, code, _ := n.ctrd.CRI().Exec(ctx, id, "cat", "/data/hello"); code != 0 || out != helloSSHFS {
				t.Errorf("the class pod created during the rollout reads %q (exit %d)", out, code)
			}
			time.Sleep(time.Second) // reads after the new agent took over
			okAfter, failAfter := countLog(t, filepath.Join(reads, "log"))
			subReadsAfter, subFailed := sub.reads(t)
			if failAfter > failBefore || okAfter-okBefore < 10 {
				t.Errorf("reads during the rollout: %d ok, %d failed", okAfter-okBefore, failAfter-failBefore)
			}
			if mp, d := n.sshfsMount(t); mp != mountPoint || d != daemon || mountIDAt(t, mp) != mountID {
				t.Errorf("after the rollout: mount %s (ID %s), daemon %d; want %s (ID %s), %d (adopted)", mp, mountIDAt(t, mp), d, mountPoint, mountID, daemon)
			}
			if c := fuseMountsAt(t, mountPoint); c != 1 {
				t.Errorf("%d sshfs mounts at %s after the rollout, want 1", c, mountPoint)
			}
			log := n.podLog(plugin, "mountkeeper")
			if !strings.Contains(log, "mountkeeper "+s.tag+": config from") || !strings.Contains(log, "adopted the mount found at start-up") {
				t.Errorf("the new agent pod %s does not log version %s and an adoption:\n%s", plugin, s.tag, log)
			}
			n.checkListenerCertificate(t, plugin, tlsCert)
			sub.checkRollout(t, s.name, subReadsBefore, subReadsAfter, subFailed, liveMounts, kubeletMounts, gap, connected)
			outcome := "started without a refusal (an agent was connected when its container was created)"
			if refusal != "" {
				outcome = "refused by the guard, then started with its mount once the new agent was up"
				t.Logf("the refusal kubectl describe pod shows: %s", refusal)
			}
			t.Logf("rollout %s: old agent pod leaving after %v, new agent pod %s available after %v; reads during it: %d ok, %d failed; the class pod created mid-rollout waited %v: %s",
				s.name, leaving.Round(time.Millisecond), plugin, rolled.Round(time.Millisecond), okAfter-okBefore, failAfter-failBefore, waited.Round(time.Millisecond), outcome)
		})
		if !ok {
			t.FailNow()
		}
	}
	sub.restartKubeletPod(t)
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

// eventsTextLines are a pod's events as `kubectl describe pod` lists them: type, reason,
// message.
func (n *deployNode) eventsTextLines(ns, name string) []string {
	return strings.Split(strings.TrimSpace(n.eventsText(ns, name)), "\n")
}

// mountIDAt returns the mount ID (mountinfo's first field) of the top mount at point.
func mountIDAt(t *testing.T, point string) string {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	ids := mountIDsAt(string(mi), point)
	if len(ids) == 0 {
		t.Fatalf("no mount at %s", point)
	}
	return ids[len(ids)-1]
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

// TestHelmRollout's subPath pods: each runs livereader every 10 ms on a configMap key mounted
// with subPath (a file) and a directory of a configMap volume mounted with subPath (items
// dir/a, dir/b), the configMap live of readerPod.
const (
	subPathLive    = "subpath-live"    // class mk-live (subPathUpdates: live): follows updates
	subPathKubelet = "subpath-kubelet" // no class: kubelet's subPath, mountkeeper's private copy
)

// rolloutSubPaths are the subPath pods of TestHelmRollout and the configMap they read.
type rolloutSubPaths struct {
	n       *deployNode
	seq     int               // the configMap's newest seq
	ids     map[string]string // pod -> its container's CRI ID
	liveUID string            // subPathLive's pod UID
	binds   map[string]string // subPathLive's container's own mount at each path at its start
}

// livePaths are the subPaths every reader pod reads.
var livePaths = []string{liveFilePath, liveDirPath}

// startRolloutSubPaths starts both subPath pods and waits until each read the first value.
func (n *deployNode) startRolloutSubPaths(t *testing.T) *rolloutSubPaths {
	t.Helper()
	n.prepareLiveReaders()
	s := &rolloutSubPaths{n: n, ids: map[string]string{}}
	targets := []string{"file:" + liveFilePath, "dir:" + liveDirPath}
	for name, class := range map[string]string{subPathLive: "mk-live", subPathKubelet: ""} {
		s.ids[name] = n.runningContainer(n.readerPod(name, class, nil, 10*time.Millisecond, false, targets...))
	}
	for name, id := range s.ids {
		if _, err := n.waitReader(name, 1, 30*time.Second, seesSeq(0, livePaths...)); err != nil {
			t.Fatalf("pod %s: the reader did not read the first value: %v", name, err)
		}
		// Both are mountkeeper's copies, not kubelet's binds: the mount's root is the copy's
		// directory, <pod UID>/<container ID>/<volume>/<n> on the copy tmpfs.
		mi := s.mountinfo(t, name)
		for _, line := range strings.Split(mi, "\n") {
			if f := strings.Fields(line); len(f) > 4 && slices.Contains(livePaths, f[4]) && !strings.Contains(f[3], "/"+id+"/") {
				t.Fatalf("pod %s: %s is not mountkeeper's copy (mount root %s):\n%s", name, f[4], f[3], mi)
			}
		}
	}
	pod, err := n.api.GetPod(n.ctx, "default", subPathLive)
	if err != nil {
		t.Fatal(err)
	}
	s.liveUID = pod.Metadata.UID
	s.binds = s.mountIDs(t, subPathLive)
	for p, ids := range s.binds {
		if strings.Contains(ids, " ") {
			t.Fatalf("pod %s: mounts %s at %s before any update, want one", subPathLive, ids, p)
		}
	}
	return s
}

// patch patches the configMap to its next seq and has kubelet sync both pods at once (an
// annotation changes: a pod update makes kubelet's pod worker sync the pod, which rewrites
// its configMap volumes), not at its next periodic sync (syncFrequency, 10 s here); it
// returns the seq.
func (s *rolloutSubPaths) patch(t *testing.T) int {
	t.Helper()
	s.seq++
	if err := s.n.api.PatchConfigMap(s.n.ctx, "default", "live", liveData(s.seq)); err != nil {
		t.Fatalf("patch configMap live to seq %d: %v", s.seq, err)
	}
	for name := range s.ids {
		if err := s.n.api.Do(s.n.ctx, "PATCH", "/api/v1/namespaces/default/pods/"+name, "application/merge-patch+json",
			map[string]any{"metadata": map[string]any{"annotations": map[string]any{"mountkeeper.test/configmap-seq": strconv.Itoa(s.seq)}}}, nil); err != nil {
			t.Fatalf("annotate pod %s: %v", name, err)
		}
	}
	return s.seq
}

// volumesAt reports whether kubelet has written seq (or newer) to both configMap volumes of
// subPathLive on the host: its atomic writer swapped their ..data.
func (s *rolloutSubPaths) volumesAt(seq int) bool {
	return s.n.volumeSeq(s.liveUID, "cfg", "value") >= seq && s.n.volumeSeq(s.liveUID, "cfgdir", "dir/a") >= seq
}

// mountIDs are the mount IDs at each subPath of pod's container (space-separated, by path).
func (s *rolloutSubPaths) mountIDs(t *testing.T, pod string) map[string]string {
	t.Helper()
	mi := s.mountinfo(t, pod)
	ids := map[string]string{}
	for _, p := range livePaths {
		ids[p] = strings.Join(mountIDsAt(mi, p), " ")
		if ids[p] == "" {
			t.Fatalf("pod %s: nothing mounted at %s in its container:\n%s", pod, p, mi)
		}
	}
	return ids
}

// mountinfo is the mount table of pod's container, from its process (PID from the runtime).
func (s *rolloutSubPaths) mountinfo(t *testing.T, pod string) string {
	t.Helper()
	pid, err := s.n.ctrd.CRI().ContainerPid(s.n.ctx, s.ids[pod])
	if err != nil {
		t.Fatalf("pod %s: %v", pod, err)
	}
	return readMountinfo(t, strconv.Itoa(pid))
}

// reads is the number of reads each pod's reader counted so far, by "pod path", and of
// failed reads; it checks that every read so far was whole and of one version (a
// directory's files of one seq), never older than one read before, and that the reader
// never restarted.
func (s *rolloutSubPaths) reads(t *testing.T) (counts map[string]int, failed int) {
	t.Helper()
	counts = map[string]int{}
	for name := range s.ids {
		runs, err := readerLog(s.n.readerLogPath(name))
		if err != nil {
			t.Fatal(err)
		}
		r := runs[len(runs)-1]
		if len(runs) != 1 {
			t.Errorf("pod %s: %d reader runs, want 1 (the container restarted)", name, len(runs))
		}
		for _, p := range livePaths {
			counts[name+" "+p] = r.reads[p]
			failed += r.failed[p]
			if r.failed[p] > 0 {
				t.Errorf("pod %s: %s: %d failed reads", name, p, r.failed[p])
			}
		}
		if len(r.fails) > 0 || len(r.heldBad) > 0 {
			t.Errorf("pod %s: failed reads (every read must be whole and of one version): %s",
				name, strings.Join(append(r.fails[:min(len(r.fails), 10)], r.heldBad...), "\n"))
		}
	}
	return counts, failed
}

// seen waits until pod's reader read seq at every path and returns when it first did (the
// later path).
func (s *rolloutSubPaths) seen(t *testing.T, pod string, seq int, timeout time.Duration) time.Time {
	t.Helper()
	r, err := s.n.waitReader(pod, 1, timeout, seesSeq(seq, livePaths...))
	if err != nil {
		t.Fatalf("pod %s did not read configMap update %d within %v: %v (kubelet's volumes on the host: cfg/value at seq %d, "+
			"cfgdir/dir/a at seq %d; with subPathUpdates: live the subPaths must follow them)",
			pod, seq, timeout, err, s.n.volumeSeq(s.liveUID, "cfg", "value"), s.n.volumeSeq(s.liveUID, "cfgdir", "dir/a"))
	}
	var last time.Time
	for _, p := range livePaths {
		at, ok := r.seenAt(p, seq)
		if !ok {
			t.Fatalf("pod %s: %s skipped seq %d, read %v", pod, p, seq, r.seqs(p))
		}
		if at.After(last) {
			last = at
		}
	}
	return last
}

// gapPatch is the configMap update made while no agent runs.
type gapPatch struct {
	seq     int
	swapped time.Time         // when the test saw both volumes of subPathLive at seq
	mounts  map[string]string // subPathLive's subPath mounts then
	readAt  time.Time         // when they were read
}

// patchInGap waits until the old agent's process (PID old) is gone, patches the configMap,
// waits until kubelet's atomic writer swapped subPathLive's volumes and reads its container's
// subPath mounts.
func (s *rolloutSubPaths) patchInGap(t *testing.T, old int) gapPatch {
	t.Helper()
	if err := s.poll(30*time.Second, func() bool {
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", old))
		return err != nil || !strings.Contains(string(cmd), "nri")
	}); err != nil {
		t.Fatalf("the old agent (PID %d) did not exit: %v", old, err)
	}
	g := gapPatch{seq: s.patch(t)}
	if err := s.poll(30*time.Second, func() bool { return s.volumesAt(g.seq) }); err != nil {
		t.Fatalf("kubelet did not write configMap update %d to pod %s's volumes: %v", g.seq, subPathLive, err)
	}
	g.swapped = time.Now()
	g.mounts = s.mountIDs(t, subPathLive)
	g.readAt = time.Now()
	return g
}

// poll checks cond every 10 ms until it holds or timeout passes.
func (s *rolloutSubPaths) poll(timeout time.Duration, cond func() bool) error {
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) || s.n.ctx.Err() != nil {
			return fmt.Errorf("not within %v", timeout)
		}
	}
	return nil
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

// checkRollout checks and logs the subPath pods through one rollout: reads (before and after
// are reads' counts, failed its failed reads), the containers' subPath mounts (as before the
// rollout: live and kubelet), the update made in the gap and one made after it.
func (s *rolloutSubPaths) checkRollout(t *testing.T, name string, before, after map[string]int, failed int, live, kubelet map[string]string, gap gapPatch, connected time.Time) {
	t.Helper()
	var reads []string
	for _, pod := range []string{subPathLive, subPathKubelet} {
		for _, p := range livePaths {
			n := after[pod+" "+p] - before[pod+" "+p]
			if n < 10 {
				t.Errorf("pod %s: %s: %d reads during the rollout, want a reader that went on reading", pod, p, n)
			}
			reads = append(reads, fmt.Sprintf("%s %s %d", pod, p, n))
		}
	}
	if m := s.mountIDs(t, subPathKubelet); !maps.Equal(m, kubelet) {
		t.Errorf("pod %s's subPath mounts (mount IDs) after the rollout: %v, before: %v; want them untouched", subPathKubelet, m, kubelet)
	}
	// The old agent is gone; the new one reads the live copies' state at its first Synchronize,
	// right after it connected. A swap seen before that was missed by every agent.
	inGap := gap.readAt.Before(connected)
	if inGap && !maps.Equal(gap.mounts, live) {
		t.Errorf("pod %s's subPath mounts while no agent ran: %v, before the rollout: %v; want them untouched", subPathLive, gap.mounts, live)
	}
	followed := s.seen(t, subPathLive, gap.seq, 60*time.Second)
	// The container's own bind of each subPath (the runtime's, from the first copy) stays;
	// one layer of the newest copy at most lies on it.
	layers := s.mountIDs(t, subPathLive)
	for _, p := range livePaths {
		ids := strings.Fields(layers[p])
		if n := len(ids); n < 1 || n > 2 || !slices.Contains(ids, s.binds[p]) {
			t.Errorf("pod %s: mounts %v at %s after update %d, want its bind %s and at most one layer", subPathLive, ids, p, gap.seq, s.binds[p])
		}
	}
	when := fmt.Sprintf("kubelet swapped the volumes %v before the new agent connected (no agent ran: the mounts were the same, %v)",
		connected.Sub(gap.swapped).Round(time.Millisecond), gap.mounts)
	if !inGap {
		when = fmt.Sprintf("kubelet swapped the volumes only %v after the new agent connected: not a missed update this time", gap.swapped.Sub(connected).Round(time.Millisecond))
	}
	patched := time.Now()
	next := s.patch(t)
	nextSeen := s.seen(t, subPathLive, next, 60*time.Second)
	t.Logf("rollout %s: subPath reads during it (until 1 s after): %s, %d failed; update %d made in the gap: %s; pod %s read it %v after the new agent connected (mounts now %v); update %d made after the rollout: read %v after the API patch",
		name, strings.Join(reads, ", "), failed, gap.seq, when, subPathLive, followed.Sub(connected).Round(time.Millisecond), layers,
		next, nextSeen.Sub(patched).Round(time.Millisecond))
}

// restartKubeletPod checks that subPathLive read every update in order and subPathKubelet only
// the value it started with, then restarts subPathKubelet's container once kubelet has written
// the newest update to its volumes, whose subPath bind of the first version is stale by then
// (kubernetes #68211): the container must start and read the newest value.
func (s *rolloutSubPaths) restartKubeletPod(t *testing.T) {
	t.Helper()
	every := make([]int, s.seq+1)
	for i := range every {
		every[i] = i
	}
	for pod, want := range map[string][]int{subPathLive: every, subPathKubelet: {0}} {
		runs, err := readerLog(s.n.readerLogPath(pod))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range livePaths {
			if got := runs[len(runs)-1].seqs(p); !slices.Equal(got, want) {
				t.Errorf("pod %s: %s read the values %v, want %v", pod, p, got, want)
			}
		}
	}
	pod, err := s.n.api.GetPod(s.n.ctx, "default", subPathKubelet)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.poll(60*time.Second, func() bool {
		return s.n.volumeSeq(pod.Metadata.UID, "cfg", "value") >= s.seq && s.n.volumeSeq(pod.Metadata.UID, "cfgdir", "dir/a") >= s.seq
	}); err != nil {
		t.Fatalf("kubelet did not write configMap update %d to pod %s's volumes: %v", s.seq, subPathKubelet, err)
	}
	killed := time.Now()
	if _, stderr, code, err := s.n.ctrd.CRI().Exec(s.n.ctx, s.ids[subPathKubelet], "kill", "1"); err != nil || code != 0 {
		t.Fatalf("pod %s: kill 1: exit %d, %v: %s", subPathKubelet, code, err, stderr)
	}
	r, err := s.n.waitReader(subPathKubelet, 2, 90*time.Second, seesSeq(s.seq, livePaths...))
	if err != nil {
		t.Fatalf("pod %s after a restart of its container: %v\nevents: %s", subPathKubelet, err, s.n.eventsText("default", subPathKubelet))
	}
	for _, p := range livePaths {
		if got := r.seqs(p); !slices.Equal(got, []int{s.seq}) {
			t.Errorf("pod %s after its container restarted: %s read the values %v, want the newest (%d) only", subPathKubelet, p, got, s.seq)
		}
	}
	if len(r.fails) > 0 {
		t.Errorf("pod %s after its container restarted: failed reads: %s", subPathKubelet, strings.Join(r.fails[:min(len(r.fails), 10)], "\n"))
	}
	t.Logf("pod %s (no class: kubelet's subPath, mountkeeper's copy) restarted after %d updates: read the newest value %v after the kill",
		subPathKubelet, s.seq, time.Since(killed).Round(time.Millisecond))
}
