package runtimeconfig

import (
	"fmt"
	"slices"
	"strings"
)

// Distribution is where a Kubernetes distribution keeps what configure and the agent need on
// a containerd node: the config containerd runs with, where mountkeeper's drop-in goes, the
// containerd binary that can dump the effective config, kubelet's root, the systemd units
// that restart containerd.
type Distribution struct {
	Name string
	// ContainerdConfig is the main file containerd runs with; ContainerdDropIn mountkeeper's.
	ContainerdConfig, ContainerdDropIn string
	// Templated: the distribution renders ContainerdConfig from a Go template at each start
	// (k3s, RKE2: config-v3.toml.tmpl, or config.toml.tmpl for version 2, in the same
	// directory, built on {{ template "base" . }}, k3s' own config): an entry added to
	// ContainerdConfig is lost at the restart meant to load it, so the imports entry goes into
	// the template.
	Templated bool
	// Containerd is the distribution's containerd binary ("": containerd on PATH).
	Containerd string
	// KubeletRoot is kubelet's --root-dir.
	KubeletRoot string
	// Units restart containerd: the first whose unit file is on the node (k3s: the server's
	// or the agent's).
	Units []string
	// CRISocket is the running containerd's CRI socket (the node label asks it which
	// handlers it has loaded).
	CRISocket string
	// Marker is a path only the distribution's nodes have: detection ("" never detected).
	Marker string
}

// CRIOSocket is CRI-O's CRI socket.
const CRIOSocket = "/var/run/crio/crio.sock"

// DefaultDistribution is the one assumed where no other is detected.
const DefaultDistribution = "kubeadm"

// Distributions, in the order they are detected. A node matching no marker is kubeadm's.
var Distributions = []Distribution{
	{
		Name:             "k3s",
		CRISocket:        "/run/k3s/containerd/containerd.sock",
		ContainerdConfig: "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
		ContainerdDropIn: "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.d/99-mountkeeper.toml",
		Templated:        true,
		Containerd:       "/var/lib/rancher/k3s/data/current/bin/containerd",
		KubeletRoot:      "/var/lib/kubelet",
		Units:            []string{"k3s", "k3s-agent"},
		Marker:           "/var/lib/rancher/k3s/agent",
	},
	{
		Name:             "rke2",
		CRISocket:        "/run/k3s/containerd/containerd.sock",
		ContainerdConfig: "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
		ContainerdDropIn: "/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.d/99-mountkeeper.toml",
		Templated:        true,
		Containerd:       "/var/lib/rancher/rke2/bin/containerd",
		KubeletRoot:      "/var/lib/kubelet",
		Units:            []string{"rke2-server", "rke2-agent"},
		Marker:           "/var/lib/rancher/rke2/agent",
	},
	{
		// microk8s renders args/containerd.toml from containerd-template.toml at each start
		// by substituting ${SNAP} and ${SNAP_DATA} only: an imports entry in the template
		// stays, so the template is the file configure edits.
		Name:             "microk8s",
		CRISocket:        "/var/snap/microk8s/common/run/containerd.sock",
		ContainerdConfig: "/var/snap/microk8s/current/args/containerd-template.toml",
		ContainerdDropIn: "/var/snap/microk8s/current/args/containerd.d/99-mountkeeper.toml",
		Containerd:       "/snap/microk8s/current/bin/containerd",
		KubeletRoot:      "/var/snap/microk8s/common/var/lib/kubelet",
		Units:            []string{"snap.microk8s.daemon-containerd"},
		Marker:           "/var/snap/microk8s/current/args",
	},
	{
		// kind's node image: /kind holds its version and product files.
		Name:             "kind",
		CRISocket:        "/run/containerd/containerd.sock",
		ContainerdConfig: ContainerdConfigPath,
		ContainerdDropIn: ContainerdDropInPath,
		KubeletRoot:      "/var/lib/kubelet",
		Units:            []string{"containerd"},
		Marker:           "/kind/version",
	},
	{
		Name:             DefaultDistribution,
		CRISocket:        "/run/containerd/containerd.sock",
		ContainerdConfig: ContainerdConfigPath,
		ContainerdDropIn: ContainerdDropInPath,
		KubeletRoot:      "/var/lib/kubelet",
		Units:            []string{"containerd"},
	},
}

// DistributionNames lists the names --distribution takes besides auto.
func DistributionNames() []string {
	var out []string
	for _, d := range Distributions {
		out = append(out, d.Name)
	}
	return out
}

// ResolveDistribution is the distribution named name, or, for "auto" (or ""), the first whose
// marker exists on the node (exists), else kubeadm's.
func ResolveDistribution(name string, exists func(path string) bool) (Distribution, error) {
	if name == "" || name == "auto" {
		for _, d := range Distributions {
			if d.Marker != "" && exists(d.Marker) {
				return d, nil
			}
		}
		name = DefaultDistribution
	}
	i := slices.IndexFunc(Distributions, func(d Distribution) bool { return d.Name == name })
	if i < 0 {
		return Distribution{}, fmt.Errorf("distribution %q: one of auto, %s", name, strings.Join(DistributionNames(), ", "))
	}
	return Distributions[i], nil
}

// Unit is the distribution's unit that restarts containerd: the first of Units whose unit
// file exists (unitExists), else the first.
func (d Distribution) Unit(unitExists func(unit string) bool) string {
	for _, u := range d.Units {
		if unitExists(u) {
			return u
		}
	}
	return d.Units[0]
}

// ForDistribution fills what o leaves unset from d (a containerd node's paths, the template,
// the binary asked for the effective config, the unit).
func (o Options) ForDistribution(d Distribution, unit string) Options {
	if o.Runtime != "containerd" {
		return o
	}
	if o.ConfigFile == "" {
		o.ConfigFile = d.ContainerdConfig
	}
	o.Templated = d.Templated && o.ConfigFile == d.ContainerdConfig
	if o.DropIn == "" {
		o.DropIn = d.ContainerdDropIn
	}
	if c, ok := o.Effective.(RuntimeCommand); ok && c.Binary == "" && d.Containerd != "" {
		o.Effective = RuntimeCommand{Binary: d.Containerd}
	}
	if o.UnitName == "" {
		o.UnitName = unit
	}
	return o
}
