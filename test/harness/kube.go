package harness

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// KubernetesVersion is what test/tools/install.sh builds kubelet and kube-apiserver from.
const KubernetesVersion = "v1.34.4"

// Binaries a KubeNode needs: kubelet and kube-apiserver from Options.BinDir (install.sh
// builds them), etcd from Debian's etcd-server.
const (
	kubeletBin           = "kubelet"
	apiserverBin         = "kube-apiserver"
	controllerManagerBin = "kube-controller-manager"
	schedulerBin         = "kube-scheduler"
	etcdBin              = "etcd"
)

const (
	kubeDirPrefix = "mk-kube-"
	// kubeStartTimeout bounds each component's start-up (etcd, apiserver, node registration).
	kubeStartTimeout = 90 * time.Second
	// kubePodCleanupTimeout bounds the polite part of Close: pods deleted through the API
	// and kubelet tearing down their containers and volumes.
	kubePodCleanupTimeout = 60 * time.Second
	kubeStopTimeout       = 10 * time.Second
	controlPlaneGrace     = 3 * time.Second
)

// kernelTunables are the sysctls kubelet sets at start-up to the values given here, unless
// protectKernelDefaults (which instead refuses to start on a host that differs). Kubelet
// only writes a value that differs, so in its mount namespace each file is covered by a
// bind mount of a file holding the value it wants: the host's settings stay as they are.
// Close also restores them, in case kubelet got to write one anyway.
var kernelTunables = []struct{ name, value string }{
	{"vm/overcommit_memory", "1"}, {"vm/panic_on_oom", "0"}, {"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"}, {"kernel/keys/root_maxkeys", "1000000"},
	{"kernel/keys/root_maxbytes", "25000000"},
}

// KubeOptions configures a KubeNode. The zero value is usable.
type KubeOptions struct {
	// BinDir holds kubelet and kube-apiserver; default as Options.BinDir.
	BinDir string
	// Etcd is the etcd binary; default "etcd" on PATH.
	Etcd string
	// NodeName is kubelet's node name; default "mk-node".
	NodeName string
	// FeatureGates are kubelet's feature gates (KubeletConfiguration.featureGates).
	FeatureGates map[string]bool
	// SyncFrequency, if set, is kubelet's syncFrequency (the harness's default is 10s): how
	// often kubelet syncs a running pod, and so rewrites its configMap and secret volumes.
	SyncFrequency time.Duration
	// MaxContainerRestartPeriod, if set, is crashLoopBackOff.maxContainerRestartPeriod
	// (needs the feature gate KubeletCrashLoopBackOffMax).
	MaxContainerRestartPeriod time.Duration
	// Log receives the output of etcd, kube-apiserver and kubelet, besides their log files in
	// Dir(). It is detached on Close. May be nil.
	Log io.Writer
	// Authorization is kube-apiserver's --authorization-mode; default AlwaysAllow.
	Authorization string
	// Systemd, if set, is the systemd the node's containerd runs in (Options.Systemd): kubelet
	// then runs there too, as the service KubeletUnit, with the systemd cgroup driver and the
	// QoS cgroups (kubepods.slice, ...), as on a kubeadm node. Dir() is bound into it.
	Systemd *Systemd
	// Network, if set, is the node's network namespace (the one its containerd runs in):
	// every component runs in it, the API client dials into it, and kubelet reports
	// NodeNetworkIP as the node's InternalIP and serves there, so the apiserver reaches it
	// for exec, logs and attach (which a node without a node IP cannot do).
	Network *NodeNetwork
	// ControlPlane also starts kube-controller-manager (namespaces, service accounts,
	// kube-root-ca.crt, PV binding, garbage collection...) and kube-scheduler, as a real
	// cluster has: pods then need no nodeName, and controllers (a DaemonSet, the e2e
	// framework's namespaces) work. Both come from BinDir.
	ControlPlane bool
}

// KubeMissing says why a KubeNode cannot start on this machine ("" when it can): a binary
// that install.sh did not build or install.
func KubeMissing(opts KubeOptions) string {
	opts = opts.withDefaults()
	bins := []string{kubeletBin, apiserverBin}
	if opts.ControlPlane {
		bins = append(bins, controllerManagerBin, schedulerBin)
	}
	for _, b := range bins {
		b = filepath.Join(opts.BinDir, b)
		if _, err := os.Stat(b); err != nil {
			return fmt.Sprintf("%s: %v (run test/tools/install.sh)", b, err)
		}
	}
	if _, err := exec.LookPath(opts.Etcd); err != nil {
		return fmt.Sprintf("etcd: %v (apt-get install etcd-server, or run test/tools/install.sh)", err)
	}
	for _, b := range []string{"unshare", "findmnt", "mount"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Sprintf("%s: %v (apt-get install util-linux mount)", b, err)
		}
	}
	return ""
}

func (o KubeOptions) withDefaults() KubeOptions {
	o.BinDir = cmp.Or(o.BinDir, os.Getenv("MOUNTKEEPER_BIN"), filepath.Join(cacheDir(), "bin"))
	o.Etcd = cmp.Or(o.Etcd, etcdBin)
	o.NodeName = cmp.Or(o.NodeName, "mk-node")
	return o
}

// KubeNode is a one-node Kubernetes control plane and kubelet on top of a harness
// containerd: etcd, kube-apiserver and kubelet, all with their data, certificates, logs and
// kubelet's root dir in one directory /tmp/mk-kube-*. There is no scheduler, controller
// manager or CNI: pods must set nodeName and hostNetwork, and use imagePullPolicy Never with
// BusyboxImage or PauseImage.
//
// Kubelet (cgroupsPerQOS off) sends its pods no cgroup parent, so containerd puts them in
// /k8s.io/<id> (defaultCgroupNamespace); the instance's Close finds them from its state and
// sweeps whatever KubeNode.Close could not remove politely. Close the KubeNode before the
// Containerd (t.Cleanup runs in reverse order of registration).
//
// With KubeOptions.Systemd the node is kubeadm's kind instead: kubelet is a service of that
// systemd (which runs the containerd too), on the systemd cgroup driver with the QoS cgroups,
// so pods are in kubepods.slice inside systemd's cgroup tree, which Systemd.Close removes.
type KubeNode struct {
	opts    KubeOptions
	ctrd    *Containerd
	dir     string
	pki     kubePKI
	log     *logSink
	sysctls map[string]string // kernel tunables before kubelet started

	etcd, apiserver        *kubeProc
	controllers, scheduler *kubeProc      // with ControlPlane
	kubelet                kubeletProcess // nil until started
	kubeletArgs            []string       // of unshare: kubelet in its own mount namespace
	etcdPort, apiPort      int

	api    *KubeClient
	closed bool
	paused bool // kube-apiserver SIGSTOPped (PauseAPIServer)
}

// StartKubeNode starts etcd, kube-apiserver and kubelet for the containerd instance c and
// waits until the node has registered. As Start, it cleans up after itself on failure and
// returns the (closed) node with the error, so `defer k.Close()` before the check is safe.
func StartKubeNode(ctx context.Context, c *Containerd, opts KubeOptions) (*KubeNode, error) {
	opts = opts.withDefaults()
	if why := KubeMissing(opts); why != "" {
		return nil, errors.New(why)
	}
	sweepStaleKube()
	dir, err := os.MkdirTemp(instanceParent, kubeDirPrefix)
	if err != nil {
		return nil, err
	}
	k := &KubeNode{opts: opts, ctrd: c, dir: dir, pki: kubePKI{dir: filepath.Join(dir, "pki")}}
	if opts.Systemd == nil { // with systemd, pods are in its kubepods.slice
		c.mu.Lock() // Close reads it under the lock
		c.ownsDefaultCgroups = c.ownsDefaultCgroups || !defaultCgroupsExist()
		c.mu.Unlock()
	}
	if err := writeOwner(layout{dir: dir}); err != nil {
		return k, errors.Join(err, k.Close())
	}
	if err := k.start(ctx); err != nil {
		return k, errors.Join(err, k.Close())
	}
	return k, nil
}

// Dir is the node's directory.
func (k *KubeNode) Dir() string { return k.dir }

// RootDir is kubelet's --root-dir (what /var/lib/kubelet is on a real node): mountkeeper's
// kubeletRoot.
func (k *KubeNode) RootDir() string { return filepath.Join(k.dir, "kubelet") }

// PodLogsDir is kubelet's podLogsDir (/var/log/pods on a real node).
func (k *KubeNode) PodLogsDir() string { return filepath.Join(k.dir, "pod-logs") }

// NodeName is the name the node registered with.
func (k *KubeNode) NodeName() string { return k.opts.NodeName }

// API is a client with cluster-admin rights.
func (k *KubeNode) API() *KubeClient { return k.api }

// AdminKubeconfig is a kubeconfig file with cluster-admin rights (for kubectl, an e2e
// suite, a controller). With a Network, its server is only reachable from inside it.
func (k *KubeNode) AdminKubeconfig() string { return filepath.Join(k.dir, "admin.kubeconfig") }

// Command is exec.Command for a program that talks to the node: in the node's network
// namespace when it has one.
func (k *KubeNode) Command(name string, args ...string) *exec.Cmd {
	if k.opts.Network != nil {
		return k.opts.Network.Command(name, args...)
	}
	return exec.Command(name, args...)
}

// LogPath is the log file of a component: "etcd", "kube-apiserver", "kubelet",
// "kube-controller-manager" or "kube-scheduler".
func (k *KubeNode) LogPath(component string) string { return filepath.Join(k.dir, component+".log") }

func (k *KubeNode) start(ctx context.Context) error {
	var err error
	if k.log, err = openLogSink(filepath.Join(k.dir, "output.log"), k.opts.Log); err != nil {
		return err
	}
	if err := k.pki.generate(k.opts.NodeName); err != nil {
		return fmt.Errorf("generate certificates: %w", err)
	}
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	k.etcdPort, k.apiPort = ports[0], ports[2]
	if err := k.startEtcd(ctx, ports[0], ports[1]); err != nil {
		return err
	}
	if err := k.startAPIServer(ctx); err != nil {
		return err
	}
	if err := k.writeKubeconfig(k.AdminKubeconfig(), "admin", k.pki.adminCert(), k.pki.adminKey()); err != nil {
		return err
	}
	if k.opts.ControlPlane {
		if err := k.startControlPlane(); err != nil {
			return err
		}
	}
	if err := k.startKubelet(ctx, ports[3]); err != nil {
		return err
	}
	return nil
}

func (k *KubeNode) startEtcd(ctx context.Context, client, peer int) error {
	cu := fmt.Sprintf("http://127.0.0.1:%d", client)
	pu := fmt.Sprintf("http://127.0.0.1:%d", peer)
	var err error
	k.etcd, err = k.startProc("etcd", k.opts.Etcd,
		"--name", "mk", "--data-dir", filepath.Join(k.dir, "etcd"),
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
		"--initial-cluster", "mk="+pu, "--initial-cluster-state", "new",
		"--log-level", "warn")
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: k.dialer()}}
	err = poll(ctx, kubeStartTimeout, func(ctx context.Context) error {
		if k.etcd.exited() {
			return errPollStop{fmt.Errorf("etcd exited: %v", k.etcd.err)}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cu+"/health", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"true"`) {
			return fmt.Errorf("etcd /health: %s %s", resp.Status, body)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("etcd did not become healthy: %w\n%s", err, tail(k.LogPath("etcd"), 20))
	}
	return nil
}

func (k *KubeNode) startAPIServer(ctx context.Context) error {
	p := k.pki
	var err error
	k.apiserver, err = k.startProc("kube-apiserver", filepath.Join(k.opts.BinDir, apiserverBin),
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", k.etcdPort),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(k.apiPort),
		"--cert-dir", filepath.Join(k.dir, "apiserver"),
		"--tls-cert-file", p.serverCert(), "--tls-private-key-file", p.serverKey(),
		"--client-ca-file", p.caCert(),
		"--kubelet-client-certificate", p.apiserverKCert(), "--kubelet-client-key", p.apiserverKKey(),
		"--service-account-key-file", p.saPublicKey(),
		"--service-account-signing-key-file", p.saPrivateKey(),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.96.0.0/24",
		"--allow-privileged=true",
		"--authorization-mode", cmp.Or(k.opts.Authorization, "AlwaysAllow"),
		"--endpoint-reconciler-type", "none",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		// The node's address: kubelet reports an InternalIP only in a node network.
		"--kubelet-preferred-address-types", "InternalIP,Hostname")
	if err != nil {
		return err
	}
	if k.api, err = newKubeClient(k.apiURL(), p.caCert(), p.adminCert(), p.adminKey(), k.dialer()); err != nil {
		return err
	}
	err = poll(ctx, kubeStartTimeout, func(ctx context.Context) error {
		if k.apiserver.exited() {
			return errPollStop{fmt.Errorf("kube-apiserver exited: %v", k.apiserver.err)}
		}
		if err := k.api.Do(ctx, http.MethodGet, "/readyz", "", nil, nil); err != nil {
			return err
		}
		// No controller manager: the default ServiceAccount is ours to create. The default
		// namespace itself comes from the apiserver, a moment after readyz.
		err := k.api.Do(ctx, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", "", map[string]any{
			"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default"},
		}, nil)
		if err != nil && !IsConflict(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver did not become ready: %w\n%s", err, tail(k.LogPath("kube-apiserver"), 30))
	}
	return nil
}

func (k *KubeNode) kubeletConfig(port int) map[string]any {
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"address":                  k.nodeIP(),
		"port":                     port,
		"readOnlyPort":             0,
		"healthzPort":              0,
		"cgroupDriver":             "cgroupfs",
		"cgroupsPerQOS":            false,
		"enforceNodeAllocatable":   []string{},
		"failSwapOn":               false,
		"failCgroupV1":             false,
		"containerRuntimeEndpoint": "unix://" + k.ctrd.Socket(),
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": k.pki.caCert()},
		},
		"authorization": map[string]any{"mode": "AlwaysAllow"},
		"resolvConf":    "",
		"podLogsDir":    k.PodLogsDir(),
		// Never garbage-collect the imported images (there is no registry to pull them back
		// from) nor evict pods because the host's disk is fuller than kubelet likes.
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%",
			"imagefs.available": "0%", "imagefs.inodesFree": "0%",
		},
		// configMap/secret volumes are refreshed on pod syncs; a short period makes updates
		// reach pods that are not restarting too.
		"syncFrequency":       "10s",
		"registerNode":        true,
		"rotateCertificates":  false,
		"serializeImagePulls": false,
	}
	if k.opts.SyncFrequency > 0 {
		cfg["syncFrequency"] = k.opts.SyncFrequency.String()
	}
	if len(k.opts.FeatureGates) > 0 {
		cfg["featureGates"] = k.opts.FeatureGates
	}
	if k.opts.Systemd != nil {
		// kubeadm's: systemd driver, QoS cgroups, node allocatable enforced on kubepods.
		cfg["cgroupDriver"] = "systemd"
		cfg["cgroupsPerQOS"] = true
		delete(cfg, "enforceNodeAllocatable")
	}
	if k.opts.MaxContainerRestartPeriod > 0 {
		cfg["crashLoopBackOff"] = map[string]any{"maxContainerRestartPeriod": k.opts.MaxContainerRestartPeriod.String()}
	}
	return cfg
}

func (k *KubeNode) startKubelet(ctx context.Context, port int) error {
	config := filepath.Join(k.dir, "kubelet.json")
	if err := writeJSON(config, k.kubeletConfig(port)); err != nil {
		return err
	}
	kubeconfig := filepath.Join(k.dir, "kubelet.kubeconfig")
	if err := k.writeKubeconfig(kubeconfig, "kubelet", k.pki.kubeletCert(), k.pki.kubeletKey()); err != nil {
		return err
	}
	for _, d := range []string{k.RootDir(), k.PodLogsDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var err error
	if k.sysctls, err = readSysctls(); err != nil {
		return err
	}
	kubeletArgs := []string{"--config", config, "--kubeconfig", kubeconfig,
		"--root-dir", k.RootDir(), "--cert-dir", filepath.Join(k.dir, "kubelet-pki"),
		"--hostname-override", k.opts.NodeName, "--v", "2"}
	if k.opts.Network != nil {
		kubeletArgs = append(kubeletArgs, "--node-ip", NodeNetworkIP)
	}
	if k.opts.Systemd != nil {
		if err := k.installKubeletUnit(ctx, kubeletArgs); err != nil {
			return err
		}
		return k.runKubelet(ctx)
	}
	script, err := k.kubeletNamespace()
	if err != nil {
		return err
	}
	k.kubeletArgs = append([]string{"--mount", "--propagation", "unchanged",
		"/bin/sh", script, filepath.Join(k.opts.BinDir, kubeletBin)}, kubeletArgs...)
	return k.runKubelet(ctx)
}

// runKubelet starts kubelet (in a mount namespace of its own, see kubeletNamespace) and waits
// until the node is registered.
func (k *KubeNode) runKubelet(ctx context.Context) error {
	// Set k.kubelet only to a process that started: an interface holding a nil pointer
	// would not be nil to Close.
	if sd := k.opts.Systemd; sd != nil {
		u, err := sd.startService(ctx, KubeletUnit, kubeletBin)
		if err != nil {
			return fmt.Errorf("%w\n%s", err, tail(k.LogPath("kubelet"), 40))
		}
		k.kubelet = u
	} else {
		p, err := k.startProc("kubelet", "unshare", k.kubeletArgs...)
		if err != nil {
			return err
		}
		k.kubelet = p
	}
	err := poll(ctx, kubeStartTimeout, func(ctx context.Context) error {
		if k.kubelet.exited() {
			return errPollStop{fmt.Errorf("kubelet exited: %v", k.kubelet.exitErr())}
		}
		return k.api.Do(ctx, http.MethodGet, "/api/v1/nodes/"+k.opts.NodeName, "", nil, nil)
	})
	if err != nil {
		return fmt.Errorf("node %s did not register: %w\n%s", k.opts.NodeName, err, tail(k.LogPath("kubelet"), 40))
	}
	return nil
}

// RestartKubelet stops kubelet with SIGTERM (as `systemctl restart kubelet` would) and starts
// it again with the same configuration; running pods keep running meanwhile. It returns once
// the new kubelet has reported the node's status (its heartbeat after the start).
func (k *KubeNode) RestartKubelet(ctx context.Context) error {
	if err := stopKubelet(k.kubelet); err != nil {
		return err
	}
	started := time.Now().Add(-time.Second).UTC()
	if err := k.runKubelet(ctx); err != nil {
		return err
	}
	return poll(ctx, kubeStartTimeout, func(ctx context.Context) error {
		if k.kubelet.exited() {
			return errPollStop{fmt.Errorf("kubelet exited: %v", k.kubelet.exitErr())}
		}
		var node struct {
			Status struct {
				Conditions []struct {
					Type              string    `json:"type"`
					LastHeartbeatTime time.Time `json:"lastHeartbeatTime"`
				} `json:"conditions"`
			} `json:"status"`
		}
		if err := k.api.Do(ctx, http.MethodGet, "/api/v1/nodes/"+k.opts.NodeName, "", nil, &node); err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == "Ready" && c.LastHeartbeatTime.After(started) {
				return nil
			}
		}
		return errors.New("no node status from the restarted kubelet yet")
	})
}

// kubeDirName is what StartKubeNode's os.MkdirTemp makes.
var kubeDirName = regexp.MustCompile(`^` + kubeDirPrefix + `[0-9]+$`)

// sweepStaleKube removes the directories of nodes whose test process died without Close
// (their processes died with it: they run with a parent-death signal). Best-effort.
func sweepStaleKube() {
	dirs, _ := filepath.Glob(filepath.Join(instanceParent, kubeDirPrefix+"*"))
	for _, dir := range dirs {
		if kubeDirName.MatchString(filepath.Base(dir)) && !ownerAlive(layout{dir: dir}) {
			if unmountAll(dir) == nil {
				_ = os.RemoveAll(dir)
			}
			// Its pods' cgroups were /k8s.io/<id>; its containerd's teardown removed those.
			_ = removeCgroupIfEmpty(defaultCgroupNamespace)
		}
	}
}

// kubeletNamespace prepares kubelet's mount namespace and returns the script that sets it
// up inside and then execs its arguments. Kubelet writes below /var/lib/kubelet
// (device-plugins/kubelet.sock, whatever --root-dir says) and /var/log/containers (a symlink
// per container log, whatever podLogsDir says), and sets kernel tunables: in its own mount
// namespace, these land on tmpfs mounts and bind mounts that vanish with it.
//
// Its volume mounts must still reach the host, where containerd and mountkeeper look for
// them: RootDir() is made a shared mount first, so its copy in kubelet's namespace is a peer
// that propagates back; the mounts holding /var/lib, /var/log and /proc/sys are made slaves
// in the namespace, so what is mounted on them there stays there.
func (k *KubeNode) kubeletNamespace() (string, error) {
	root := k.RootDir()
	if err := unix.Mount(root, root, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind %s onto itself: %w", root, err)
	}
	if err := unix.Mount("", root, "", unix.MS_SHARED, ""); err != nil {
		return "", fmt.Errorf("make %s shared: %w", root, err)
	}
	ns := filepath.Join(k.dir, "ns")
	if err := os.MkdirAll(ns, 0o755); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("set -eu\n")
	b.WriteString("for d in /var/lib /var/log /proc/sys; do mount --make-slave \"$(findmnt -n -o TARGET -T \"$d\")\"; done\n")
	b.WriteString("mount -t tmpfs -o mode=0755,size=16m mk-kubelet-lib /var/lib\n")
	b.WriteString("mount -t tmpfs -o mode=0755,size=16m mk-kubelet-log /var/log\n")
	for _, kt := range kernelTunables {
		f := filepath.Join(ns, "sysctl-"+strings.ReplaceAll(kt.name, "/", "."))
		if err := os.WriteFile(f, []byte(kt.value+"\n"), 0o444); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "mount --bind -o ro %s /proc/sys/%s\n", f, kt.name)
	}
	b.WriteString("exec \"$@\"\n")
	script := filepath.Join(ns, "kubelet-ns.sh")
	return script, os.WriteFile(script, []byte(b.String()), 0o755)
}

// Close deletes every pod through the API and waits (bounded) until kubelet has torn them
// down, stops kubelet, kube-apiserver and etcd, unmounts whatever is still mounted below
// Dir() (kubelet's volume and subPath mounts, its rshared root dir), removes the container
// log symlinks kubelet made in /var/log/containers for this node, restores the kernel
// tunables kubelet changed, and removes Dir(). It is nil-safe and idempotent, and may be
// retried after an error.
func (k *KubeNode) Close() error {
	if k == nil || k.closed {
		return nil
	}
	var errs []error
	// Controllers would recreate what deleteAllPods deletes.
	k.controllers.kill(controlPlaneGrace)
	k.scheduler.kill(controlPlaneGrace)
	if k.kubelet != nil && !k.kubelet.exited() && k.apiserver != nil && !k.apiserver.exited() {
		ctx, cancel := context.WithTimeout(context.Background(), kubePodCleanupTimeout)
		errs = append(errs, k.deleteAllPods(ctx))
		cancel()
	}
	// kubelet must stop on SIGTERM. The control plane holds nothing worth a clean shutdown
	// (kube-apiserver often takes longer than 10s to drain): it gets a short grace period.
	errs = append(errs, stopKubelet(k.kubelet))
	if k.paused {
		_ = k.apiserver.cmd.Process.Signal(syscall.SIGCONT)
		k.paused = false
	}
	k.apiserver.kill(controlPlaneGrace)
	k.etcd.kill(controlPlaneGrace)
	k.log.detach()
	errs = append(errs, unmountAll(k.dir), restoreSysctls(k.sysctls))
	if mounts, err := mountsUnder(k.dir); err != nil || len(mounts) > 0 {
		errs = append(errs, fmt.Errorf("not removing %s: mounts remain below it", k.dir))
	} else if err := os.RemoveAll(k.dir); err != nil {
		errs = append(errs, err)
	} else {
		k.closed = true
	}
	return errors.Join(errs...)
}

// deleteAllPods deletes every pod of every namespace and waits until kubelet has removed
// them from the API (which it does once their containers are gone) and cleaned up their
// directories (volumes unmounted).
func (k *KubeNode) deleteAllPods(ctx context.Context) error {
	pods, err := k.api.ListPods(ctx, "")
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pods {
		if err := k.api.DeletePod(ctx, p.Metadata.Namespace, p.Metadata.Name, 0); err != nil && !IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	podsDir := filepath.Join(k.RootDir(), "pods")
	err = poll(ctx, kubePodCleanupTimeout, func(ctx context.Context) error {
		left, err := k.api.ListPods(ctx, "")
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("%d pods left in the API", len(left))
		}
		entries, err := os.ReadDir(podsDir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if len(entries) > 0 {
			return fmt.Errorf("kubelet has not cleaned up %d pod directories in %s", len(entries), podsDir)
		}
		ctrs, err := k.ctrd.CRI().ListContainers(ctx)
		if err != nil {
			return err
		}
		running := 0
		for _, c := range ctrs {
			if c.GetState().String() == "CONTAINER_RUNNING" {
				running++
			}
		}
		if running > 0 {
			return fmt.Errorf("%d containers still running", running)
		}
		return nil
	})
	if err != nil {
		// Say why: kubelet logs why it keeps an orphaned pod's directory, and what is mounted
		// and left in it tells whether a mount of ours holds it.
		errs = append(errs, fmt.Errorf("kubelet did not tear the pods down: %w\nmounted below %s:\n%s\nleft below it:\n%s\n%s",
			err, podsDir, mountList(podsDir), leafPaths(podsDir, 30), tailMatching(k.LogPath("kubelet"), "rphaned", 10)))
	}
	return errors.Join(errs...)
}

// mountList lists the mounts at or below dir, relative to it, with their filesystem types,
// from mountinfo alone (it touches no mount, so a hung network volume cannot block it).
func mountList(dir string) string {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err.Error()
	}
	if len(mounts) == 0 {
		return "(none)"
	}
	var out []string
	for _, m := range mounts {
		rel, _ := filepath.Rel(dir, m.mountPoint)
		out = append(out, fmt.Sprintf("%s (%s)", rel, m.fsType))
	}
	return strings.Join(out, "\n")
}

// leafPaths lists up to max of the files and empty directories below dir, relative to it.
// A mount point below dir is listed as a leaf, marked, and not walked into: a hung network
// volume would block the walk, and what a mount shows is not what holds the directory.
func leafPaths(dir string, max int) string {
	points := map[string]bool{}
	if mounts, err := mountsUnder(dir); err == nil {
		for _, m := range mounts {
			points[m.mountPoint] = true
		}
	}
	var out []string
	more := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return nil
		}
		mount := points[path]
		if d.IsDir() && !mount {
			if entries, err := os.ReadDir(path); err != nil || len(entries) > 0 {
				return nil
			}
		}
		if len(out) == max {
			more++
		} else {
			rel, _ := filepath.Rel(dir, path)
			if mount {
				rel += " (mount point)"
			}
			out = append(out, rel)
		}
		if mount && d.IsDir() {
			return filepath.SkipDir // WalkDir reads a directory only after this call
		}
		return nil
	})
	if more > 0 {
		out = append(out, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(out, "\n")
}

func readSysctls() (map[string]string, error) {
	m := map[string]string{}
	for _, kt := range kernelTunables {
		v, err := os.ReadFile(filepath.Join("/proc/sys", kt.name))
		if err != nil {
			return nil, fmt.Errorf("read sysctl: %w", err)
		}
		m[kt.name] = strings.TrimSpace(string(v))
	}
	return m, nil
}

func restoreSysctls(saved map[string]string) error {
	var errs []error
	for name, want := range saved {
		p := filepath.Join("/proc/sys", name)
		if v, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(v)) == want {
			continue
		}
		if err := os.WriteFile(p, []byte(want+"\n"), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", name, want, err))
		}
	}
	return errors.Join(errs...)
}

// kubeProc is one control-plane process.
type kubeProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startProc runs bin with args, its output going to <name>.log in Dir() and to the node's
// log writer. It gets SIGKILL if the test process dies.
func (k *KubeNode) startProc(name, bin string, args ...string) (*kubeProc, error) {
	file, err := os.OpenFile(k.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		file.Close()
		return nil, err
	}
	cmd := k.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Dir = k.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		file.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	sink := &prefixSink{file: file, out: k.log, prefix: name + ": "}
	go func() {
		defer r.Close()
		defer file.Close()
		_, _ = io.Copy(sink, r)
	}()
	p := &kubeProc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// kubeletProcess is a running kubelet: a kubeProc, or a systemdService on a node with
// KubeOptions.Systemd.
type kubeletProcess interface {
	exited() bool
	exitErr() error // why it exited, once it has
	stop(timeout time.Duration) error
}

// stopKubelet stops kubelet, if it was started.
func stopKubelet(p kubeletProcess) error {
	if p == nil {
		return nil
	}
	return p.stop(kubeStopTimeout)
}

func (p *kubeProc) exitErr() error { return p.err }

func (p *kubeProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after timeout. A nil or exited process is stopped.
func (p *kubeProc) stop(timeout time.Duration) error {
	if p == nil || p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s %d ignored SIGTERM for %v and was killed", p.name, p.cmd.Process.Pid, timeout)
}

// kill sends SIGTERM, then SIGKILL after grace, and waits until the process is gone.
func (p *kubeProc) kill(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// prefixSink writes a process's output to its log file and, line-prefixed, to the node's
// shared log sink (which forwards to KubeOptions.Log until detached).
type prefixSink struct {
	file   *os.File
	out    *logSink
	prefix string
	rest   []byte
}

func (s *prefixSink) Write(p []byte) (int, error) {
	_, _ = s.file.Write(p)
	s.rest = append(s.rest, p...)
	for {
		i := strings.IndexByte(string(s.rest), '\n')
		if i < 0 {
			break
		}
		_, _ = s.out.Write([]byte(s.prefix + string(s.rest[:i+1])))
		s.rest = s.rest[i+1:]
	}
	return len(p), nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// apiURL is the apiserver's address, from inside the node's network.
func (k *KubeNode) apiURL() string { return fmt.Sprintf("https://127.0.0.1:%d", k.apiPort) }

// nodeIP is the address kubelet serves on.
func (k *KubeNode) nodeIP() string {
	if k.opts.Network != nil {
		return NodeNetworkIP
	}
	return "127.0.0.1"
}

// dialer is how the harness's own clients reach the node's ports.
func (k *KubeNode) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if k.opts.Network != nil {
		return k.opts.Network.DialContext
	}
	return (&net.Dialer{}).DialContext
}

// writeKubeconfig writes a kubeconfig for the apiserver with this client certificate.
func (k *KubeNode) writeKubeconfig(path, user, cert, key string) error {
	return writeJSON(path, map[string]any{
		"apiVersion": "v1", "kind": "Config",
		"clusters": []any{map[string]any{"name": "mk", "cluster": map[string]any{
			"server": k.apiURL(), "certificate-authority": k.pki.caCert()}}},
		"users": []any{map[string]any{"name": user, "user": map[string]any{
			"client-certificate": cert, "client-key": key}}},
		"contexts":        []any{map[string]any{"name": "mk", "context": map[string]any{"cluster": "mk", "user": user}}},
		"current-context": "mk",
	})
}

// startControlPlane starts kube-controller-manager and kube-scheduler with cluster-admin
// credentials, no leader election and no serving port of their own (nothing here reads
// their metrics). They need no wait: what depends on them (a namespace's default
// ServiceAccount, a pod's binding) is waited for by whoever needs it.
func (k *KubeNode) startControlPlane() error {
	var err error
	k.controllers, err = k.startProc(controllerManagerBin, filepath.Join(k.opts.BinDir, controllerManagerBin),
		"--kubeconfig", k.AdminKubeconfig(),
		"--leader-elect=false", "--secure-port=0",
		"--root-ca-file", k.pki.caCert(),
		"--service-account-private-key-file", k.pki.saPrivateKey(),
		"--use-service-account-credentials=false",
		// A node without CNI-assigned ranges: no IPAM, no cloud routes.
		"--allocate-node-cidrs=false", "--configure-cloud-routes=false",
		"--profiling=false")
	if err != nil {
		return err
	}
	k.scheduler, err = k.startProc(schedulerBin, filepath.Join(k.opts.BinDir, schedulerBin),
		"--kubeconfig", k.AdminKubeconfig(),
		"--leader-elect=false", "--secure-port=0",
		"--profiling=false")
	return err
}
