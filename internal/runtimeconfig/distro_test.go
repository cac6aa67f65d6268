package runtimeconfig

import (
	"slices"
	"strings"
	"testing"
)

// TestResolveDistribution: auto finds the distribution by the files its nodes have, kubeadm
// where none matches; a name is taken as given; a wrong one is refused with the list. The
// unit is the first of the distribution's that the node has.
func TestResolveDistribution(t *testing.T) {
	for _, tc := range []struct {
		name    string
		present []string
		want    string
	}{
		{"auto", nil, "kubeadm"},
		{"", []string{"/var/lib/rancher/k3s/agent"}, "k3s"},
		{"auto", []string{"/var/lib/rancher/rke2/agent"}, "rke2"},
		{"auto", []string{"/var/snap/microk8s/current/args"}, "microk8s"},
		{"auto", []string{"/kind/version"}, "kind"},
		{"kubeadm", []string{"/var/lib/rancher/k3s/agent"}, "kubeadm"},
	} {
		d, err := ResolveDistribution(tc.name, func(p string) bool { return slices.Contains(tc.present, p) })
		if err != nil || d.Name != tc.want {
			t.Errorf("%q with %v: %v %v, want %s", tc.name, tc.present, d.Name, err, tc.want)
		}
	}
	if _, err := ResolveDistribution("k0s", nil); err == nil || !strings.Contains(err.Error(), "one of auto, k3s, rke2, microk8s, kind, kubeadm") {
		t.Errorf("k0s: %v", err)
	}
	k3s, _ := ResolveDistribution("k3s", nil)
	if u := k3s.Unit(func(u string) bool { return u == "k3s-agent" }); u != "k3s-agent" {
		t.Errorf("unit on a k3s agent: %s", u)
	}
	o := Options{Runtime: "containerd", Effective: RuntimeCommand{}}.ForDistribution(k3s, "k3s")
	if !o.Templated || o.ConfigFile != k3s.ContainerdConfig || o.Unit() != "k3s" || o.Effective.(RuntimeCommand).Binary != k3s.Containerd {
		t.Errorf("k3s options %+v", o)
	}
	if o := (Options{Runtime: "containerd", ConfigFile: "/etc/other.toml"}).ForDistribution(k3s, "k3s"); o.Templated {
		t.Error("a config file of the operator's choice is taken for k3s' rendered one")
	}
}
