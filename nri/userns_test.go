package nri

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/idmap"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// kernelSays answers for the sources in cannot as the kernel does for a filesystem that cannot
// be idmapped.
type kernelSays struct{ cannot map[string]string }

func (k kernelSays) CheckTmpfs() error { return k.Check("tmpfs") }

func (k kernelSays) Check(source string) error {
	if t, ok := k.cannot[source]; ok {
		return &idmap.NotSupportedError{Source: source, FSType: t, Err: unix.EINVAL}
	}
	return nil
}

// withIdmap makes the plugin ask in instead of the kernel whether a mount can be idmapped.
func (p *Plugin) withIdmap(in engine.Idmapper) *Plugin {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idmap = in
	p.rebuildLocked()
	return p
}

// TestCreateContainerUserNamespace: a container with a user namespace (a "user" entry in its
// Linux namespaces) gets its class bind mounts with runc's "idmap" option, which maps them
// with the container's own mappings; one without gets them unchanged (runc refuses "idmap"
// there); a source the kernel cannot idmap refuses the container.
func TestCreateContainerUserNamespace(t *testing.T) {
	p := NewPlugin(mustConfig(t, "runtimeClasses:\n  uns:\n    mounts:\n      - {source: /srv/a, destination: /a, propagation: rslave}\n      - {source: /srv/fuse, destination: /f}\n"), true, &specmodtest.Host{}, quietLogger())
	p.withIdmap(kernelSays{})
	pod := &api.PodSandbox{Name: "pod", Namespace: "ns", RuntimeHandler: "uns"}
	userns := &api.LinuxContainer{Namespaces: []*api.LinuxNamespace{{Type: "mount"}, {Type: "user", Path: "/proc/1/ns/user"}}}

	adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app", Id: "c1", Linux: userns})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range adj.GetMounts() {
		if !slices.Contains(m.Options, "idmap") {
			t.Errorf("user namespace: mount %s has options %q, want idmap", m.Destination, m.Options)
		}
	}
	adj, _, err = p.CreateContainer(context.Background(), pod, &api.Container{Name: "app", Id: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range adj.GetMounts() {
		if slices.Contains(m.Options, "idmap") || slices.Contains(m.Options, "ridmap") {
			t.Errorf("no user namespace: mount %s has options %q, want no idmap", m.Destination, m.Options)
		}
	}
	p.withIdmap(kernelSays{cannot: map[string]string{"/srv/fuse": "fuse.sshfs"}})
	_, _, err = p.CreateContainer(context.Background(), pod, &api.Container{Name: "app", Id: "c3", Linux: userns})
	if err == nil || !strings.Contains(err.Error(), "mount /srv/fuse -> /f (rprivate): its fuse.sshfs filesystem cannot be idmapped") || !strings.Contains(err.Error(), "allowWithoutIdmap: true") {
		t.Fatalf("a filesystem the kernel cannot idmap: %v, want the refusal naming it and allowWithoutIdmap", err)
	}
}
