package nri

import (
	"context"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// TestCreateContainerBidirectionalNeedsPrivileged: over NRI a container counts as privileged
// when the runtime mounted /sys read-write (containerd and CRI-O do so only for privileged
// containers) and it has no user namespace; only then does it get an rshared class mount.
func TestCreateContainerBidirectionalNeedsPrivileged(t *testing.T) {
	p := NewPlugin(mustConfig(t, "runtimeClasses:\n  bidi:\n    mounts: [{source: /srv/bidi, destination: /bidi, propagation: Bidirectional}]\n"), true, &specmodtest.Host{}, quietLogger())
	pod := &api.PodSandbox{Name: "pod", Namespace: "ns", RuntimeHandler: "bidi"}
	sysfs := func(opt string) []*api.Mount {
		return []*api.Mount{{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", opt}}}
	}
	userns := &api.LinuxContainer{Namespaces: []*api.LinuxNamespace{{Type: "user"}}}
	for _, tt := range []struct {
		name string
		ctr  *api.Container
		ok   bool
	}{
		{name: "privileged: /sys read-write", ctr: &api.Container{Name: "app", Mounts: sysfs("rw")}, ok: true},
		{name: "unprivileged: /sys read-only", ctr: &api.Container{Name: "app", Mounts: sysfs("ro")}},
		{name: "/sys read-write in a user namespace", ctr: &api.Container{Name: "app", Mounts: sysfs("rw"), Linux: userns}},
	} {
		adj, _, err := p.CreateContainer(context.Background(), pod, tt.ctr)
		switch {
		case tt.ok && (err != nil || len(adj.GetMounts()) != 1):
			t.Errorf("%s: %v, mounts %v; want the rshared mount", tt.name, err, mountStrings(adj.GetMounts()))
		case !tt.ok && tt.ctr.Linux != nil && (err == nil || !strings.Contains(err.Error(), "mount /srv/bidi -> /bidi (rshared): rshared (Bidirectional) is refused for a container with a user namespace")):
			t.Errorf("%s: %v, want the user namespace refusal", tt.name, err)
		case !tt.ok && tt.ctr.Linux == nil && (err == nil || !strings.Contains(err.Error(), "mount /srv/bidi -> /bidi (rshared): rshared (Bidirectional) is for privileged containers only")):
			t.Errorf("%s: %v, want the refusal", tt.name, err)
		}
	}
}
