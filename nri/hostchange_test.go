package nri

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestCreateContainerSeesHostChange: the plugin's host check answers from hostmount's cache
// while the host is unchanged, and the next CreateContainer after a change sees it: the
// sources' mount made private (a change the mount table's notification does not report, so
// the cache asks statmount), made shared again, then a source removed.
func TestCreateContainerSeesHostChange(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	src := mountSharedSources(t)
	p := NewPlugin(threeMountConfig(t, src), true, NewHostChecker(), quietLogger())
	pod := &api.PodSandbox{Name: "pod", Namespace: "ns", RuntimeHandler: "bench"}
	n := 0
	create := func(step string, want ...string) {
		t.Helper()
		n++
		adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Id: "c" + strings.Repeat("x", n), Name: "app"})
		switch {
		case len(want) == 0 && (err != nil || len(adj.GetMounts()) != 3):
			t.Fatalf("%s: %v, %d mounts; want the 3 class mounts", step, err, len(adj.GetMounts()))
		case len(want) > 0 && err == nil:
			t.Fatalf("%s: created, want a refusal containing %q", step, want)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to contain %q", step, err, w)
			}
		}
	}
	mount := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v: %s", args, err, out)
		}
	}
	create("first container")
	create("second container (from the cache)")
	mount("--make-private", src)
	create("after the sources' mount was made private",
		"/slave (rslave): host mount point "+src+" holding the source is private",
		"/shared (rshared): host mount point "+src+" holding the source is private")
	mount("--make-shared", src)
	create("shared again")
	create("shared again (from the cache)")
	if err := os.Remove(filepath.Join(src, "private")); err != nil {
		t.Fatal(err)
	}
	create("after a source was removed", "source "+filepath.Join(src, "private")+" does not exist")
}
