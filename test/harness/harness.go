// Package harness runs a private containerd (with runc, CRI and optionally NRI) for end-to-end
// tests of mountkeeper.
//
// Every instance lives in its own short temporary directory under /tmp: containerd's root and
// state, its sockets, runc's state, the shim sockets and the logs. Pods made through the
// harness's CRI client get a cgroup parent named after that directory; a kubelet's pods,
// which have none, get /k8s.io/<id>, found from the tasks in the instance's state. So the
// instance can find and remove everything it created even after a test failed half-way, and
// nothing touches a containerd that may run on the host.
package harness

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Image names the harness imports into the k8s.io namespace on Start.
const (
	// BusyboxImage holds Debian's busybox-static at /bin/busybox with a symlink for every
	// applet, so tests can run sh, sleep, cat, mount and friends.
	BusyboxImage = "docker.io/library/mk-busybox:latest"
	// PauseImage holds a tiny static /pause that waits for SIGTERM or SIGINT; it is also the
	// pinned sandbox image, since no registry is reachable to pull the real one.
	PauseImage = "registry.k8s.io/pause:mk"
)

// DefaultRuntimeHandler is the CRI runtime handler every instance has.
const DefaultRuntimeHandler = "runc"

// defaultCacheDir matches test/tools/install.sh, which builds the binaries into its bin/.
const defaultCacheDir = "/var/cache/mountkeeper-test"

// Binaries the harness needs in Options.BinDir.
const (
	containerdBin = "containerd"
	shimBin       = "containerd-shim-runc-v2"
	ctrBin        = "ctr"
	runcBin       = "runc"
)

// Options configures an instance. The zero value is usable: runc only, NRI off.
type Options struct {
	// BinDir holds containerd, containerd-shim-runc-v2, ctr and runc.
	// Default: $MOUNTKEEPER_BIN, else $MOUNTKEEPER_CACHE/bin, else /var/cache/mountkeeper-test/bin.
	BinDir string
	// Handlers are CRI runtime handlers besides "runc"; each runs the same runc binary, so a
	// test can tell pods apart by handler (as mountkeeper does) without a second runtime.
	Handlers []string
	// BaseRuntimeSpecs maps a handler (including "runc") to the path of an OCI spec JSON used as
	// its base_runtime_spec, e.g. to install OCI hooks for that handler only.
	BaseRuntimeSpecs map[string]string
	// NRI enables NRI with its socket at NRISocket().
	NRI bool
	// NRIPluginPath and NRIPluginConfigPath are where containerd looks for pre-registered
	// plugins and their config; empty means empty directories inside the instance directory.
	NRIPluginPath, NRIPluginConfigPath string
	// NRIRequestTimeout is plugin_request_timeout; zero keeps containerd's default (2s).
	NRIRequestTimeout time.Duration
	// CNIBinDir and CNIConfDir are the CRI plugin's CNI bin_dirs and conf_dir (e.g.
	// /usr/lib/cni and a dir holding a conflist, for pods without the host network); empty
	// means an empty directory inside the instance directory (no CNI network).
	CNIBinDir, CNIConfDir string
	// Network, if set, is the network namespace containerd (and so its shims, CNI plugins
	// and pods) runs in; see StartNodeNetwork. Nil: the test process's.
	Network *NodeNetwork
	// RegistryConfigDir, if set, is containerd's registry config_path (hosts.toml files
	// per registry). Start writes a _default/hosts.toml there that sends every pull to a
	// closed loopback port: no test image comes from a registry, and a pull the harness did
	// not expect fails at once instead of reaching out.
	RegistryConfigDir string
	// Log receives containerd's stdout and stderr, in addition to containerd.log in Dir().
	// It is detached on Close, so a testing.T-backed writer is safe. May be nil.
	Log io.Writer
	// Systemd, if set, makes the instance a node like kubeadm's (containerd only): containerd
	// runs as the service ContainerdUnit of that systemd (boot it with
	// SystemdOptions.CgroupV1 on a hybrid host), the instance directory is bound into it, and
	// every handler's runc uses the systemd cgroup driver (SystemdCgroup = true). Pods then
	// need a systemd cgroup parent, which a kubelet on it (KubeOptions.Systemd) gives them:
	// the harness's own RunPod does not. containerd's output goes to LogPath(), not to Log.
	Systemd *Systemd
}

// cacheDir is where install.sh puts binaries and where the harness caches image archives.
func cacheDir() string {
	return cmp.Or(os.Getenv("MOUNTKEEPER_CACHE"), defaultCacheDir)
}

// binDir is BinDir or its default.
func (o Options) binDir() string {
	return cmp.Or(o.BinDir, os.Getenv("MOUNTKEEPER_BIN"), filepath.Join(cacheDir(), "bin"))
}

// withDefaults fills in defaults and checks that the binaries exist, so a missing install
// fails with a hint instead of an obscure exec error later.
func (o Options) withDefaults() (Options, error) {
	o.BinDir = o.binDir()
	for _, b := range []string{containerdBin, shimBin, ctrBin, runcBin} {
		p := filepath.Join(o.BinDir, b)
		if _, err := os.Stat(p); err != nil {
			return o, fmt.Errorf("harness binary %s: %w (run test/tools/install.sh)", p, err)
		}
	}
	for h, spec := range o.BaseRuntimeSpecs {
		if h != DefaultRuntimeHandler && !slices.Contains(o.Handlers, h) {
			return o, fmt.Errorf("base runtime spec %s given for unknown handler %q", spec, h)
		}
	}
	return o, nil
}
