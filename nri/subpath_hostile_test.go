package nri

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/hostmount"
	"github.com/mountkeeper/mountkeeper/internal/metrics"
	"github.com/mountkeeper/mountkeeper/internal/metrics/metricstest"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// hostileNode is a kubelet root and a plugin serving it, for the hostile subPath tests: each
// builds kubelet's on-disk layout for a pod that attacks the copies, then asks the plugin
// what a victim gets.
type hostileNode struct {
	t       *testing.T
	dir     string
	root    string
	state   string
	plugin  *Plugin
	metrics *metrics.Metrics
	logs    *bytes.Buffer // the plugin's warnings and errors
}

// newHostileNode starts a plugin whose config is kubeletRoot, stateDir, one class "fast"
// with one bind mount of a real directory, and extra (YAML lines at top level).
func newHostileNode(t *testing.T, extra string) *hostileNode {
	t.Helper()
	dir := shortDir(t)
	t.Cleanup(func() { harness.UnmountAll(dir) })
	n := &hostileNode{t: t, dir: dir, root: filepath.Join(dir, "kubelet"), state: filepath.Join(dir, "state")}
	src := filepath.Join(dir, "class")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := mustConfig(t, "kubeletRoot: "+n.root+"\nstateDir: "+n.state+"\n"+extra+
		"runtimeClasses:\n  fast:\n    mounts: [{source: "+src+", destination: /class}]\n")
	n.metrics = metrics.New("test")
	n.logs = &bytes.Buffer{}
	log := logrus.New()
	log.SetOutput(n.logs)
	log.SetLevel(logrus.WarnLevel)
	n.plugin = NewPlugin(cfg, true, hostmount.NewChecker(hostmount.System{}), log, WithMetrics(n.metrics))
	if _, err := n.plugin.Configure(context.Background(), "", "test", "0"); err != nil { // puts the copies in force
		t.Fatal(err)
	}
	return n
}

// create asks the plugin about container id of pod (namespace ns, runtime handler) with one
// mount per source, at /m<i>; it returns the source each destination is bound from.
func (n *hostileNode) create(ns, pod, handler, id string, sources []string) (map[string]string, error) {
	ctr := &api.Container{Id: id, Name: "app"}
	for i, s := range sources {
		ctr.Mounts = append(ctr.Mounts, &api.Mount{Source: s, Destination: fmt.Sprintf("/m%d", i), Type: "bind", Options: []string{"rbind", "ro"}})
	}
	adj, _, err := n.plugin.CreateContainer(context.Background(), &api.PodSandbox{Name: pod, Namespace: ns, RuntimeHandler: handler}, ctr)
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	for _, m := range ctr.Mounts {
		got[m.Destination] = m.Source
	}
	for _, m := range adj.GetMounts() {
		got[m.Destination] = m.Source
	}
	return got, nil
}

// fallbacks is mountkeeper_subpath_fallbacks_total{reason} as Prometheus scrapes it.
func (n *hostileNode) fallbacks(reason string) float64 {
	n.t.Helper()
	v := metricstest.Get(n.t, n.metrics.Handler()).Value("mountkeeper_subpath_fallbacks_total", map[string]string{"reason": reason})
	if v < 0 {
		n.t.Fatalf("no mountkeeper_subpath_fallbacks_total{reason=%q} in the scrape", reason)
	}
	return v
}

// countEntries counts the files, directories and symlinks below dir (dir itself not counted).
func countEntries(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if p != dir {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSubPathOneTenantCannotFillTheCopySpace is a hostile case: one pod's projected
// volume of 16 configMaps of about 1 MB each, mounted 16 times with subPath ..data (kubelet
// allows it), must not leave another pod, in another namespace, without its copy.
func TestSubPathOneTenantCannotFillTheCopySpace(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	n := newHostileNode(t, "")
	attacker := harness.KubeletPod{Root: n.root, UID: "uid-attacker"}
	proj := attacker.VolumeDir("kubernetes.io~projected", "all")
	files := map[string]string{}
	for i := range 16 {
		files[fmt.Sprintf("cm%02d", i)] = strings.Repeat("x", 1_048_000) // one full configMap each
	}
	if _, err := harness.WriteAtomic(proj, files); err != nil {
		t.Fatal(err)
	}
	var sources []string
	for i := range 16 {
		s, err := attacker.BindSubPath(proj, "all", "app", i, "..data")
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, s)
	}
	got, err := n.create("tenant-a", "attacker", "", "attacker-1", sources)
	if err != nil {
		t.Fatalf("the attacker's container was refused: kubelet alone would start it: %v", err)
	}
	// One copy of 16 MiB and a page fits the pod's 32 MiB; the other 15 keep kubelet's bind.
	copied := 0
	for i, s := range sources {
		if got[fmt.Sprintf("/m%d", i)] != s {
			copied++
		}
	}
	if over := n.fallbacks("over_budget"); copied != 1 || over != 15 {
		t.Errorf("attacker: %d copies and %v over_budget fallbacks, want 1 and 15", copied, over)
	}

	victim := harness.KubeletPod{Root: n.root, UID: "uid-victim"}
	cfg := victim.VolumeDir("kubernetes.io~configmap", "cfg")
	if _, err := harness.WriteAtomic(cfg, map[string]string{"app.conf": "victim"}); err != nil {
		t.Fatal(err)
	}
	src, err := victim.BindSubPath(cfg, "cfg", "app", 0, "app.conf")
	if err != nil {
		t.Fatal(err)
	}
	got, err = n.create("kube-system", "victim", "", "victim-1", []string{src})
	if err != nil {
		t.Fatalf("the victim, in another namespace, was refused after the attacker: %v", err)
	}
	if !strings.HasPrefix(got["/m0"], filepath.Join(n.state, "subpath")+"/") {
		t.Fatalf("the victim's subPath is bound from %s, want its private copy below %s", got["/m0"], filepath.Join(n.state, "subpath"))
	}
	if b, err := os.ReadFile(got["/m0"]); err != nil || string(b) != "victim" {
		t.Errorf("the victim's copy reads %q, %v; want victim", b, err)
	}
}

// waitOutstanding waits until no call of the node's bounded pool runs any more; it fails the
// test if one still runs after a generous while (a copy that never stops).
func waitOutstanding(t *testing.T) {
	t.Helper()
	for range 600 {
		if bounded.Default.Outstanding() == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%d calls of the bounded pool still run 30s later", bounded.Default.Outstanding())
}

// TestSubPathGivenUpCopyLeavesNothing is a hostile case: a configMap of 80,000 empty
// keys mounted with subPath ..data overruns its copy's time bound (no entry budget stops it
// first here: the budgets are raised). The container starts with kubelet's bind, and once
// the copying work has stopped nothing it wrote is left under the state dir.
func TestSubPathGivenUpCopyLeavesNothing(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	n := newHostileNode(t, "subPathCopies: {podEntries: 1000000, nodeEntries: 2000000, podBytes: 4Gi, nodeBytes: 4Gi, timeout: 100ms}\n")
	pod := harness.KubeletPod{Root: n.root, UID: "uid-many"}
	vol := pod.VolumeDir("kubernetes.io~configmap", "many")
	// On a tmpfs of its own, as kubelet keeps a secret: writing 80,000 files to disk takes
	// this machine over 20 s.
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", vol, "tmpfs", 0, "size=64m,nr_inodes=200000"); err != nil {
		t.Fatal(err)
	}
	files := make(map[string]string, 80_000)
	for i := range 80_000 {
		files[fmt.Sprintf("k%05d", i)] = ""
	}
	if _, err := harness.WriteAtomic(vol, files); err != nil {
		t.Fatal(err)
	}
	src, err := pod.BindSubPath(vol, "many", "app", 0, "..data")
	if err != nil {
		t.Fatal(err)
	}
	got, err := n.create("ns", "many", "", "many-1", []string{src})
	if err != nil {
		t.Errorf("a copy that overran its bound refused the container: %v", err)
	} else if got["/m0"] != src {
		t.Errorf("the subPath is bound from %s, want kubelet's bind %s", got["/m0"], src)
	}
	if got := n.fallbacks("timeout"); got != 1 {
		t.Errorf("%v timeout fallbacks counted, want 1", got)
	}
	waitOutstanding(t)
	if left := countEntries(t, filepath.Join(n.state, "subpath")); left != 0 {
		t.Errorf("%d entries left under %s once the given-up copy stopped, want 0", left, filepath.Join(n.state, "subpath"))
	}
}

// TestSubPathFIFOsDoNotStarveHostChecks is a hostile case: 20 containers whose subPath
// names a FIFO in a configMap volume start as kubelet would start them, and after them a
// class container, whose host check shares the node's bounded pool, still starts.
func TestSubPathFIFOsDoNotStarveHostChecks(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	n := newHostileNode(t, "")
	for i := range 20 {
		pod := harness.KubeletPod{Root: n.root, UID: fmt.Sprintf("uid-fifo-%d", i)}
		vol := pod.VolumeDir("kubernetes.io~configmap", "cfg")
		if _, err := harness.WriteAtomic(vol, map[string]string{"placeholder": ""}); err != nil {
			t.Fatal(err)
		}
		data, err := filepath.EvalSymlinks(filepath.Join(vol, "..data"))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(data, "pipe"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("..data/pipe", filepath.Join(vol, "pipe")); err != nil {
			t.Fatal(err)
		}
		src, err := pod.BindSubPath(vol, "cfg", "app", 0, "pipe")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.create("ns", fmt.Sprint("fifo-", i), "", fmt.Sprint("fifo-", i), []string{src}); err != nil {
			t.Errorf("container %d with a FIFO at its subPath: %v", i, err)
		}
	}
	if _, err := n.create("ns", "class", "fast", "class-1", nil); err != nil {
		t.Errorf("a class container after 20 FIFO subPaths: %v", err)
	}
	if got := n.fallbacks("not_regular"); got != 20 {
		t.Errorf("%v not_regular fallbacks counted, want 20", got)
	}
	// Each is logged once, at warning, with its reason and what it met.
	var lines int
	for _, l := range strings.Split(n.logs.String(), "\n") {
		if strings.Contains(l, "level=warning") && strings.Contains(l, "reason=not_regular") && strings.Contains(l, "is a fifo") {
			lines++
		}
	}
	if lines != 20 {
		t.Errorf("%d warnings name a fifo with reason=not_regular, want 20; log:\n%s", lines, n.logs.String())
	}
}

// TestSubPathHostPathOverNRI is the layout rule through the plugin: hostPath subPaths
// (a file, a directory, and a file that was replaced, so that kubelet's bind of it is stale)
// of a class container and of one of no class are left exactly as kubelet bound them; the
// stale one, which nothing proves the volume of, is counted as unknown_volume, and neither
// container is refused (the runtime fails the stale bind, as without mountkeeper).
func TestSubPathHostPathOverNRI(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	n := newHostileNode(t, "")
	host := filepath.Join(n.dir, "host")
	if err := os.MkdirAll(filepath.Join(host, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"app.conf", "old.conf"} {
		if err := os.WriteFile(filepath.Join(host, f), []byte("v1"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, handler := range []string{"fast", ""} {
		pod := harness.KubeletPod{Root: n.root, UID: fmt.Sprint("uid-host-", i)}
		if err := os.MkdirAll(filepath.Join(n.root, "pods", pod.UID, "volumes"), 0o750); err != nil {
			t.Fatal(err)
		}
		var sources []string
		for j, sub := range []string{"app.conf", "d", "old.conf"} {
			s, err := pod.BindSubPath(host, "host", "app", j, sub)
			if err != nil {
				t.Fatal(err)
			}
			sources = append(sources, s)
		}
		if err := os.Remove(filepath.Join(host, "old.conf")); err != nil { // kubelet's bind of it is stale now
			t.Fatal(err)
		}
		got, err := n.create("ns", fmt.Sprint("host-", i), handler, fmt.Sprint("host-", i), sources)
		if err != nil {
			t.Fatalf("handler %q: refused: %v", handler, err)
		}
		for j, s := range sources {
			if got[fmt.Sprintf("/m%d", j)] != s {
				t.Errorf("handler %q: /m%d is bound from %s, want kubelet's bind %s", handler, j, got[fmt.Sprintf("/m%d", j)], s)
			}
		}
		if got := n.fallbacks("unknown_volume"); got != float64(i+1) {
			t.Errorf("handler %q: %v unknown_volume fallbacks counted, want %d", handler, got, i+1)
		}
		if err := os.WriteFile(filepath.Join(host, "old.conf"), []byte("v2"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
