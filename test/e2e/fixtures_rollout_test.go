//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

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
		for _, p := range livePaths {
			for _, m := range mountsIn(t, mi, p) {
				if !strings.Contains(m.Root, "/"+id+"/") {
					t.Fatalf("pod %s: %s is not mountkeeper's copy (mount root %s):\n%s", name, p, m.Root, mi)
				}
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
		ids[p] = strings.Join(mountIDsAt(t, mi, p), " ")
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

// helmRollout is TestHelmRollout's node: the chart's images A (e2e-a) and B (e2e-b) imported,
// the chart installed, and what runs under the rollouts (an sshfs reader pod of class mk-sshfs
// and the subPath pods). Each subtest brings the release to the image it starts from
// (atAgent), so that it runs alone as well as after the one before it.
type helmRollout struct {
	n       *deployNode
	helmBin string
	chart   string
	reads   string // host directory the class pods write their reads to, mounted at /reads
	classes []any
	config  map[string]any
	tlsCert []byte // the node listener's certificate, from the Secret made before the install
	agent   string // the agent pod of the newest rollout
	tag     string // the image the agent pod runs; "" while unknown (a rollout failed halfway)

	readerVolumes, readerMounts []any
	mountPoint                  string // the sshfs class mount's host mount point
	mountID                     string // its mount ID
	daemon                      int    // its FUSE daemon's PID
	sub                         *rolloutSubPaths
}

// newHelmRollout starts the node (controllers on, the classes' handlers in containerd, their
// RuntimeClasses left to the chart), an sshd whose export the class mk-sshfs mounts, and
// imports images A and B: two builds of this tree with two version stamps, not pulled.
func newHelmRollout(t *testing.T, ctx context.Context, helmBin string) *helmRollout {
	t.Helper()
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
	r := &helmRollout{n: n, helmBin: helmBin, chart: filepath.Join(deployDir, "helm", "mountkeeper"), reads: filepath.Join(n.dir, "reads")}
	if err := os.MkdirAll(r.reads, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"e2e-a", "e2e-b"} {
		n.importVersionImage(t, tag)
	}

	classMount := map[string]any{
		"type": "fuse.sshfs", "source": "root@127.0.0.1:" + n.sshd.Export(), "destination": "/data",
		"propagation": "HostToContainer", "options": n.sshd.ClientOptions(),
	}
	r.config = map[string]any{"kubeletRoot": n.kube.RootDir(), "stateDir": filepath.Join(n.dir, "state"), "unmountGrace": "2s"}
	configText, _ := json.Marshal(map[string]any{"kubeletRoot": r.config["kubeletRoot"], "stateDir": r.config["stateDir"],
		"runtimeClasses": map[string]any{"mk-sshfs": map[string]any{"mounts": []any{classMount}}}})
	n.scopes.add(t, configText)
	// mk-live has no mount of its own: its pods' subPaths follow updates (the subPath pods).
	r.classes = []any{map[string]any{"name": "mk-sshfs", "mounts": []any{classMount}},
		map[string]any{"name": "mk-live", "subPathUpdates": "live"}}
	r.readerVolumes = []any{map[string]any{"name": "reads", "hostPath": map[string]any{"path": r.reads, "type": "Directory"}}}
	r.readerMounts = []any{map[string]any{"name": "reads", "mountPath": "/reads"}}
	return r
}

// values writes the chart values of image tag and returns their file.
func (r *helmRollout) values(t *testing.T, tag string) string {
	t.Helper()
	n := r.n
	v := map[string]any{
		"image":             map[string]any{"tag": tag},
		"hostNamespacesPID": os.Getpid(),
		"uninstall":         map[string]any{"enabled": false},
		"containerd":        map[string]any{"configFile": n.ctrd.ConfigPath(), "dropIn": filepath.Join(filepath.Dir(n.ctrd.ConfigPath()), "conf.d", "99-mountkeeper.toml")},
		"installDir":        filepath.Join(n.dir, "hookbin"),
		"nri":               map[string]any{"socket": n.ctrd.NRISocket()},
		"nodeLabels":        map[string]any{"criSocket": n.ctrd.Socket(), "interval": "1s", "apiServer": n.kube.APIURL()},
		"log":               map[string]any{"level": "debug"},
		"metrics":           map[string]any{"nodeListener": map[string]any{"enabled": true, "port": 9659, "tls": map[string]any{"secretName": "mountkeeper-metrics-tls"}}},
		"runtimeClasses":    r.classes,
		"config":            r.config,
	}
	data, _ := json.Marshal(v) // YAML is a superset of JSON
	path := filepath.Join(n.dir, "values-"+tag+".yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// helm runs helm on the node's cluster in deployNS and returns its output.
func (r *helmRollout) helm(t *testing.T, args ...string) string {
	t.Helper()
	return runHelm(t, r.n.ctx, r.helmBin, r.n.kube.AdminKubeconfig(), append(args, "--namespace", deployNS)...)
}

// uninstall uninstalls the chart and removes every pod, before the node's cleanup: no
// DaemonSet controller recreating the agent pod then.
func (r *helmRollout) uninstall(t *testing.T) {
	uninstallRelease(t, r.n, func(args ...string) { r.helm(t, args...) })
}

// uninstallRelease runs helm uninstall (through helm, which adds the namespace) and deletes
// every pod left, waiting until none is: the agent goes before the class pods' containers are
// torn down by the node's cleanup, which otherwise races the agent's own shutdown.
func uninstallRelease(t *testing.T, n *deployNode, helm func(args ...string)) {
	t.Helper()
	helm("uninstall", "mountkeeper", "--wait", "--timeout", "60s")
	pods, err := n.api.ListPods(n.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if err := n.api.DeletePod(n.ctx, p.Metadata.Namespace, p.Metadata.Name, 1); err != nil && !harness.IsNotFound(err) {
			t.Error(err)
		}
	}
	if err := harnessPoll(n.ctx, 60*time.Second, func() error {
		left, err := n.api.ListPods(n.ctx, "")
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("%d pods left", len(left))
		}
		return err
	}); err != nil {
		t.Errorf("%v\nkubelet log:\n%s", err, tailFile(n.kube.LogPath("kubelet"), 6000))
	}
}

// install makes the node listener's certificate (metrics.nodeListener.tls.secretName: a
// Secret made before the install, as cert-manager would), installs the chart with image A and
// waits until its agent pod connected.
func (r *helmRollout) install(t *testing.T) {
	t.Helper()
	n := r.n
	// (The controller manager gives it its default ServiceAccount.)
	if err := n.api.Do(n.ctx, "POST", "/api/v1/namespaces", "", map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": deployNS},
	}, nil); err != nil {
		t.Fatal(err)
	}
	tlsCert, tlsKey := selfSignedPair(t, metricsServerName)
	r.tlsCert = tlsCert
	if err := n.api.Do(n.ctx, "POST", "/api/v1/namespaces/"+deployNS+"/secrets", "", map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": map[string]any{"name": "mountkeeper-metrics-tls"},
		"stringData": map[string]any{"tls.crt": string(tlsCert), "tls.key": string(tlsKey), "ca.crt": string(tlsCert)},
	}, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r.helm(t, "install", "mountkeeper", r.chart, "--values", r.values(t, "e2e-a"))
	r.agent = n.waitRollout(t, "e2e-a", 120*time.Second)
	r.tag = "e2e-a"
	t.Logf("helm install: agent pod %s of the DaemonSet connected after %v", r.agent, time.Since(start).Round(time.Millisecond))
}

// startReaders restarts containerd (the init container declared the class's handler;
// containerd reads it at start), starts the sshfs reader pod (a read every 100 ms, logged to
// reads/log) and the subPath pods, and notes the sshfs host mount the rollouts must keep.
func (r *helmRollout) startReaders(t *testing.T) {
	t.Helper()
	n := r.n
	if err := n.ctrd.Restart(n.ctx); err != nil {
		t.Fatal(err)
	}
	n.runPod(t, "sshfs-reader", "mk-sshfs",
		`while true; do if cat /data/hello >/dev/null 2>&1; then echo ok; else echo FAIL; fi >> /reads/log; sleep 0.1; done`,
		false, r.readerVolumes, r.readerMounts)
	r.mountPoint, r.daemon = n.sshfsMount(t)
	r.mountID = mountIDAt(t, r.mountPoint)
	t.Logf("sshfs host mount %s (mount ID %s), FUSE daemon %d", r.mountPoint, r.mountID, r.daemon)
	r.sub = n.startRolloutSubPaths(t)
}

// atAgent brings the release to image tag if its agent pod runs another (or a rollout failed
// halfway): a subtest run alone starts where it would after the ones before it.
func (r *helmRollout) atAgent(t *testing.T, tag string) {
	t.Helper()
	if r.tag == tag {
		return
	}
	r.tag = ""
	r.helm(t, "upgrade", "mountkeeper", r.chart, "--values", r.values(t, tag))
	r.agent = r.n.waitRollout(t, tag, 120*time.Second)
	r.tag = tag
	t.Logf("set up: the agent pod %s runs %s", r.agent, tag)
}

// atUpdates patches the configMap until it is at seq (at least), each update read by
// subPathLive before the next: a subtest run alone finds as many updates as after the ones
// before it.
func (r *helmRollout) atUpdates(t *testing.T, seq int) {
	t.Helper()
	for r.sub.seq < seq {
		r.sub.seen(t, subPathLive, r.sub.patch(t), 60*time.Second)
	}
}
