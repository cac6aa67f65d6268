//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// liveClassConfig has one class per value of subPathUpdates: mk-live (live), mk-kube (the
// default, kubelet's semantics) and mk-optin (podOptIn), each with a class mount of its own
// (two classes may not share a source). KUBELET and SRC are replaced.
const liveClassConfig = `
kubeletRoot: KUBELET
stateDir: SRC/state
runtimeClasses:
  mk-live:
    subPathUpdates: live
    mounts:
      - {source: SRC/class-live, destination: /class, propagation: None, readOnly: true}
  mk-kube:
    mounts:
      - {source: SRC/class-kube, destination: /class, propagation: None, readOnly: true}
  mk-optin:
    subPathUpdates: podOptIn
    mounts:
      - {source: SRC/class-optin, destination: /class, propagation: None, readOnly: true}
`

// liveOptInAnnotation is the pod annotation a pod of a podOptIn class opts in with.
const liveOptInAnnotation = "mountkeeper.io/live-subpaths"

// liveValueSize is livereader's valueSize: every value written is this long.
const liveValueSize = 4096

// liveValue is the value of key at seq as livereader checks it: the seq, a body that differs
// per key and seq, and the checksum of both, liveValueSize bytes in all.
func liveValue(key string, seq int) string {
	head := fmt.Sprintf("%06d ", seq)
	fill := strings.Repeat(fmt.Sprintf("%s.%d|", key, seq), liveValueSize)
	body := head + fill[:liveValueSize-10-len(head)]
	return body + fmt.Sprintf(" %08x\n", crc32.ChecksumIEEE([]byte(body)))
}

// liveData is the configMap's data at seq: the key mounted as a file and the two keys of the
// directory.
func liveData(seq int) map[string]string {
	return map[string]string{"value": liveValue("value", seq), "a": liveValue("a", seq), "b": liveValue("b", seq)}
}

// Paths inside the reader pods.
const (
	liveFilePath  = "/etc/live/value" // subPath "value" of the configMap volume
	liveDirPath   = "/etc/live/dir"   // subPath "dir" of a configMap volume with items dir/a, dir/b
	liveWholePath = "/etc/whole/value"
)

// startLiveNode starts a node with the three classes of liveClassConfig and the plugin on it,
// and builds livereader into dir/tools (mounted into the reader pods). Before the plugin
// starts, `mountkeeper validate` must accept the config: a build without live subPath updates
// fails here, saying so.
func startLiveNode(t testing.TB, ctx context.Context, opts harness.KubeOptions) *kubeNode {
	t.Helper()
	n := newKubeNodeWith(t, ctx, opts, []string{"mk-live", "mk-kube", "mk-optin"})
	for _, d := range []string{"src/class-live", "src/class-kube", "src/class-optin"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	config := n.writeConfig(liveClassConfig)
	if out, err := exec.CommandContext(ctx, n.bin, "validate", "--config", config).CombinedOutput(); err != nil {
		if strings.Contains(string(out), "subPathUpdates") {
			t.Fatalf("live subPath updates (issue 25) are not in this build of mountkeeper (%s): "+
				"`mountkeeper validate` refuses the runtime class key subPathUpdates: %v\n%s", n.bin, err, out)
		}
		t.Fatalf("mountkeeper validate --config %s: %v\n%s", config, err, out)
	}
	n.startPluginWith(liveClassConfig)
	n.prepareLiveReaders()
	return n
}

// prepareLiveReaders makes what readerPod's pods need: livereader built into dir/tools
// (mounted into them), dir/out for their logs, and the configMap live at seq 0.
func (n *kubeNode) prepareLiveReaders() {
	n.t.Helper()
	for _, d := range []string{"tools", "out"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			n.t.Fatal(err)
		}
	}
	build := exec.CommandContext(n.ctx, "go", "build", "-o", filepath.Join(n.dir, "tools", "livereader"),
		"github.com/mountkeeper/mountkeeper/test/tools/livereader")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		n.t.Fatalf("build livereader: %v\n%s", err, out)
	}
	if err := n.api.CreateConfigMap(n.ctx, "default", "live", liveData(0)); err != nil {
		n.t.Fatal(err)
	}
}

// readerPod is a pod of class that runs livereader on its targets ("file:<path>" or
// "dir:<path>"), logging to dir/out/<name>.log; whole adds the configMap volume mounted whole
// at /etc/whole.
func (n *kubeNode) readerPod(name, class string, annotations map[string]string, interval time.Duration, whole bool, targets ...string) podSpec {
	volumes := []any{
		map[string]any{"name": "cfg", "configMap": map[string]any{"name": "live"}},
		map[string]any{"name": "cfgdir", "configMap": map[string]any{"name": "live", "items": []any{
			map[string]any{"key": "a", "path": "dir/a"}, map[string]any{"key": "b", "path": "dir/b"},
		}}},
		map[string]any{"name": "tools", "hostPath": map[string]any{"path": filepath.Join(n.dir, "tools"), "type": "Directory"}},
		map[string]any{"name": "out", "hostPath": map[string]any{"path": filepath.Join(n.dir, "out"), "type": "Directory"}},
	}
	mounts := []any{
		map[string]any{"name": "cfg", "mountPath": liveFilePath, "subPath": "value"},
		map[string]any{"name": "cfgdir", "mountPath": liveDirPath, "subPath": "dir"},
		map[string]any{"name": "tools", "mountPath": "/tools", "readOnly": true},
		map[string]any{"name": "out", "mountPath": "/out"},
	}
	if whole {
		mounts = append(mounts, map[string]any{"name": "cfg", "mountPath": filepath.Dir(liveWholePath)})
	}
	return podSpec{
		name: name, runtimeClass: class, annotations: annotations,
		script:  fmt.Sprintf("exec /tools/livereader -out /out/%s.log -interval %s %s", name, interval, strings.Join(targets, " ")),
		volumes: volumes, mounts: mounts,
	}
}

// readerRun is what one run of livereader (one container start) logged.
type readerRun struct {
	seen     map[string][]readerSeen // by path, in order
	fails    []string                // fail lines (at most 200 per path are logged)
	failed   map[string]int          // by path, from the last count line: every failed read
	reads    map[string]int          // by path, from the last count line
	heldOK   map[string]int          // by path
	heldBad  []string
	held     map[string]int // by path: held lines, ok or bad (one follows each seen line but a run's first)
	complete bool           // ended with a count line
}

type readerSeen struct {
	seq int
	at  time.Time
}

// readerLog parses a livereader log: one readerRun per start line.
func readerLog(path string) ([]*readerRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs []*readerRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		word, rest, _ := strings.Cut(line, " ")
		if word == "start" {
			runs = append(runs, &readerRun{seen: map[string][]readerSeen{}, failed: map[string]int{},
				reads: map[string]int{}, heldOK: map[string]int{}, held: map[string]int{}})
			continue
		}
		if len(runs) == 0 {
			return nil, fmt.Errorf("%s: %q before any start line", path, line)
		}
		r := runs[len(runs)-1]
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("%s: malformed line %q", path, line)
		}
		target, kv := fields[0], keyValues(fields[1:])
		switch word {
		case "seen":
			seq, err1 := strconv.Atoi(kv["seq"])
			ns, err2 := strconv.ParseInt(kv["t"], 10, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%s: malformed line %q", path, line)
			}
			r.seen[target] = append(r.seen[target], readerSeen{seq, time.Unix(0, ns)})
		case "fail":
			r.fails = append(r.fails, rest)
		case "held":
			r.held[target]++
			if len(fields) > 2 && fields[2] == "ok" {
				r.heldOK[target]++
			} else {
				r.heldBad = append(r.heldBad, rest)
			}
		case "count":
			r.reads[target], _ = strconv.Atoi(kv["reads"])
			r.failed[target], _ = strconv.Atoi(kv["fails"])
			r.complete = true
		default:
			return nil, fmt.Errorf("%s: unknown line %q", path, line)
		}
	}
	return runs, sc.Err()
}

func keyValues(fields []string) map[string]string {
	kv := map[string]string{}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// lastSeq is the newest seq the run saw at path, or -1.
func (r *readerRun) lastSeq(path string) int {
	s := r.seen[path]
	if len(s) == 0 {
		return -1
	}
	return s[len(s)-1].seq
}

func (r *readerRun) seqs(path string) []int {
	var out []int
	for _, s := range r.seen[path] {
		out = append(out, s.seq)
	}
	return out
}

// seenAt is when the run first read seq at path.
func (r *readerRun) seenAt(path string, seq int) (time.Time, bool) {
	for _, s := range r.seen[path] {
		if s.seq == seq {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// readerLogPath is where the reader pod name logs on the host.
func (n *kubeNode) readerLogPath(name string) string {
	return filepath.Join(n.dir, "out", name+".log")
}

// waitReader waits until the newest run of pod name's reader satisfies cond (runs is at least
// minRuns long), and returns that run.
func (n *kubeNode) waitReader(name string, minRuns int, timeout time.Duration, cond func(*readerRun) error) (*readerRun, error) {
	var last *readerRun
	err := harnessPoll(n.ctx, timeout, func() error {
		runs, err := readerLog(n.readerLogPath(name))
		if err != nil {
			return err
		}
		if len(runs) < minRuns {
			return fmt.Errorf("%d reader runs, want %d", len(runs), minRuns)
		}
		last = runs[len(runs)-1]
		return cond(last)
	})
	return last, err
}

// seesSeq is a waitReader condition: the run has read seq (or newer) at every path, and has
// logged all it logs of that read.
func seesSeq(seq int, paths ...string) func(*readerRun) error {
	return func(r *readerRun) error {
		for _, p := range paths {
			if got := r.lastSeq(p); got < seq {
				return fmt.Errorf("%s: newest seq read %d, want %d", p, got, seq)
			}
			// livereader writes a new value's seen line, then reads the descriptor it held and
			// writes the held line: wait for that too, which callers count (heldOK).
			if seen := len(r.seen[p]); r.held[p] < seen-1 {
				return fmt.Errorf("%s: %d held lines for %d values seen, the last one's not written yet", p, r.held[p], seen)
			}
		}
		return nil
	}
}

// volumeSeq is the seq of key in the pod's configMap volume on the host, as kubelet last wrote
// it; -1 if it cannot be read.
func (n *kubeNode) volumeSeq(uid, volume, key string) int {
	b, err := os.ReadFile(filepath.Join(n.kube.RootDir(), "pods", uid, "volumes", "kubernetes.io~configmap", volume, key))
	if err != nil || len(b) < 6 {
		return -1
	}
	seq, err := strconv.Atoi(string(b[:6]))
	if err != nil {
		return -1
	}
	return seq
}

// liveUpdates is how many times TestKubeLiveSubPath patches the configMap.
const liveUpdates = 20

// TestKubeLiveSubPath is issue 25 (kubernetes #50345) on the real node. A pod of a class with
// subPathUpdates: live mounts a configMap key (a file subPath) and a directory of a configMap
// volume (subPath "dir", items dir/a and dir/b); livereader reads both in a tight loop while
// the configMap is patched through the API 20 times, each time waiting until kubelet has
// written the update and the container has read it. Every read must be whole (no empty,
// partial, torn, ENOENT or EBUSY read), every update must be read, in order, and the
// descriptor opened before each update must still read the value before it; afterwards each
// live path has at most two mount layers in the container. A pod of a class
// with the default (kubelet's semantics) reads the value it started with throughout; both are
// then restarted (their reader killed, kubelet restarts it) and read the newest value. Of a
// podOptIn class, the pod with the annotation follows the updates, the one without does not.
// Then the agent restarts between two patches (kubeLiveAgentRestart): the live pods keep what
// they read while it is away, and read the patch made meanwhile once it is back.
// Seen failing: on a build without live updates (validate refuses subPathUpdates; with the key
// dropped, update 1 never reaches the subPath), with the switch done naively (old layer
// detached before the new one is attached: about 2,000 empty reads per path), with the old
// layer never detached (21 mounts per path), and with the static pods in a live class.
func TestKubeLiveSubPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Kubelet rewrites a configMap volume at its pod syncs: a 2s period keeps 20 updates
	// short.
	n := startLiveNode(t, ctx, harness.KubeOptions{SyncFrequency: 2 * time.Second})
	targets := []string{"file:" + liveFilePath, "dir:" + liveDirPath}
	paths := []string{liveFilePath, liveDirPath}
	optIn := map[string]string{liveOptInAnnotation: "true"}
	pods := []struct {
		name, class string
		annotations map[string]string
		interval    time.Duration
		live        bool
	}{
		{"live", "mk-live", nil, 0, true},
		{"static", "mk-kube", nil, 10 * time.Millisecond, false},
		{"optin-yes", "mk-optin", optIn, 10 * time.Millisecond, true},
		{"optin-no", "mk-optin", nil, 10 * time.Millisecond, false},
	}
	ids := map[string]string{}
	for _, p := range pods {
		ids[p.name] = n.runningContainer(n.readerPod(p.name, p.class, p.annotations, p.interval, false, targets...))
	}
	for _, p := range pods {
		if _, err := n.waitReader(p.name, 1, 30*time.Second, seesSeq(0, paths...)); err != nil {
			t.Fatalf("pod %s: the reader did not read the first value: %v", p.name, err)
		}
	}
	live, err := n.api.GetPod(ctx, "default", "live")
	if err != nil {
		t.Fatal(err)
	}

	for seq := 1; seq <= liveUpdates; seq++ {
		if err := n.api.PatchConfigMap(ctx, "default", "live", liveData(seq)); err != nil {
			t.Fatalf("patch configMap live to seq %d: %v", seq, err)
		}
		if _, err := n.waitReader("live", 1, 45*time.Second, seesSeq(seq, paths...)); err != nil {
			t.Fatalf("update %d of %d did not reach the live subPaths of pod live: %v (kubelet's volumes on the host: "+
				"cfg/value at seq %d, cfgdir/dir/a at seq %d; with subPathUpdates: live the subPaths must follow them)",
				seq, liveUpdates, err, n.volumeSeq(live.Metadata.UID, "cfg", "value"), n.volumeSeq(live.Metadata.UID, "cfgdir", "dir/a"))
		}
	}
	if _, err := n.waitReader("optin-yes", 1, 30*time.Second, seesSeq(liveUpdates, paths...)); err != nil {
		t.Errorf("pod optin-yes (class podOptIn, annotated %s: \"true\") did not follow the updates: %v", liveOptInAnnotation, err)
	}
	// A second of count lines, so that the counts cover every read up to the last update.
	time.Sleep(1500 * time.Millisecond)

	every := make([]int, liveUpdates+1)
	for i := range every {
		every[i] = i
	}
	for _, p := range pods {
		runs, err := readerLog(n.readerLogPath(p.name))
		if err != nil {
			t.Fatal(err)
		}
		r := runs[len(runs)-1]
		if len(runs) != 1 {
			t.Errorf("pod %s: %d reader runs before any restart, want 1", p.name, len(runs))
		}
		for _, path := range paths {
			got := r.seqs(path)
			switch {
			case p.name == "live":
				if !slices.Equal(got, every) {
					t.Errorf("pod live: %s read the values %v, want every one of 0..%d in order", path, got, liveUpdates)
				}
				if r.heldOK[path] != liveUpdates {
					t.Errorf("pod live: %s: %d of %d descriptors opened before an update read the value before it", path, r.heldOK[path], liveUpdates)
				}
			case p.live:
				if len(got) == 0 || got[len(got)-1] != liveUpdates {
					t.Errorf("pod %s: %s read the values %v, want the last one %d", p.name, path, got, liveUpdates)
				}
			default:
				if !slices.Equal(got, []int{0}) {
					t.Errorf("pod %s (kubelet's semantics): %s read the values %v, want only the one it started with (0)", p.name, path, got)
				}
			}
			t.Logf("pod %s: %s: %d reads, %d failed, values read %v", p.name, path, r.reads[path], r.failed[path], got)
			if r.reads[path] == 0 {
				t.Errorf("pod %s: %s: no count of reads logged", p.name, path)
			}
		}
		if len(r.fails) > 0 {
			t.Errorf("pod %s: %d failed reads (every read must be whole), first: %s", p.name, len(r.fails), strings.Join(r.fails[:min(len(r.fails), 10)], "\n"))
		}
		if len(r.heldBad) > 0 {
			t.Errorf("pod %s: descriptors opened before an update read something else than the value before it:\n%s", p.name, strings.Join(r.heldBad, "\n"))
		}
	}

	newest := kubeLiveAgentRestart(t, n, live.Metadata.UID, paths)

	// After 22 updates and an agent restart each live path has at most two mount layers in
	// the container (the newest copy, and the one beneath it while it is being detached).
	for _, name := range []string{"live", "optin-yes"} {
		out, stderr, code, err := n.ctrd.CRI().Exec(ctx, ids[name], "cat", "/proc/self/mountinfo")
		if err != nil || code != 0 {
			t.Fatalf("pod %s: cat /proc/self/mountinfo: exit %d, %v: %s", name, code, err, stderr)
		}
		for _, path := range paths {
			layers := mountLayers(out, path)
			if layers < 1 || layers > 2 {
				t.Errorf("pod %s: %d mounts at %s after %d updates, want 1 or 2:\n%s", name, layers, path, newest, out)
			}
			t.Logf("pod %s: %d mount layers at %s after %d updates", name, layers, path, newest)
		}
	}

	// Both restart into the newest value: SIGTERM to the reader (PID 1), kubelet restarts
	// the container.
	for _, name := range []string{"live", "static"} {
		if _, stderr, code, err := n.ctrd.CRI().Exec(ctx, ids[name], "kill", "1"); err != nil || code != 0 {
			t.Fatalf("pod %s: kill 1: exit %d, %v: %s", name, code, err, stderr)
		}
	}
	for _, name := range []string{"live", "static"} {
		r, err := n.waitReader(name, 2, 90*time.Second, seesSeq(newest, paths...))
		if err != nil {
			t.Errorf("pod %s after its container restarted: %v", name, err)
			continue
		}
		for _, path := range paths {
			got := r.seqs(path)
			if !slices.Equal(got, []int{newest}) {
				t.Errorf("pod %s after its container restarted: %s read the values %v, want the newest (%d) only", name, path, got, newest)
			}
			t.Logf("pod %s after its container restarted: %s read the values %v", name, path, got)
		}
		if len(r.fails) > 0 {
			t.Errorf("pod %s after its container restarted: failed reads: %s", name, strings.Join(r.fails[:min(len(r.fails), 10)], "\n"))
		}
	}
}

// kubeLiveAgentRestart restarts the agent between two patches of the configMap (issue 25: an
// agent restart picks the live subPaths up again). With the agent stopped, patch 21 is made
// and kubelet writes it into pod live's volumes; a second later the live pods' readers still
// read 20 (nobody follows). The agent starts again; after its Synchronize both live pods read
// 21 on both paths, and then patch 22. Every read stays whole and every value is read, in
// order. It logs the time from the agent's connection to the readers' first read of 21, and
// returns the newest seq.
func kubeLiveAgentRestart(t *testing.T, n *kubeNode, uid string, paths []string) int {
	t.Helper()
	livePods := []string{"live", "optin-yes"}
	missed := liveUpdates + 1
	n.plugin.Stop()
	if err := n.api.PatchConfigMap(n.ctx, "default", "live", liveData(missed)); err != nil {
		t.Fatalf("patch configMap live to seq %d: %v", missed, err)
	}
	if err := harnessPoll(n.ctx, 45*time.Second, func() error {
		if f, d := n.volumeSeq(uid, "cfg", "value"), n.volumeSeq(uid, "cfgdir", "dir/a"); f != missed || d != missed {
			return fmt.Errorf("kubelet's volumes at seq %d (cfg/value) and %d (cfgdir/dir/a), want %d", f, d, missed)
		}
		return nil
	}); err != nil {
		t.Fatalf("with the agent stopped, the patch did not reach pod live's volumes: %v", err)
	}
	time.Sleep(time.Second) // an agent would apply it within milliseconds
	for _, name := range livePods {
		if _, err := n.waitReader(name, 1, 0, func(r *readerRun) error {
			for _, p := range paths {
				if got := r.lastSeq(p); got != liveUpdates {
					return fmt.Errorf("%s read seq %d, want %d", p, got, liveUpdates)
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("pod %s, with the agent stopped and the patch in its volumes: %v (what it had: nobody follows)", name, err)
		}
	}

	logged := newLogTimes("connected to")
	n.pluginLog = io.MultiWriter(testWriter{t, "mountkeeper"}, logged)
	n.startPluginWith(liveClassConfig)
	for _, name := range livePods {
		r, err := n.waitReader(name, 1, 30*time.Second, seesSeq(missed, paths...))
		if err != nil {
			t.Fatalf("pod %s: the agent started again, the patch made while it was away does not reach the live subPaths: %v", name, err)
		}
		for _, p := range paths {
			at, _ := r.seenAt(p, missed)
			t.Logf("pod %s: %s read the patch made while the agent was away %.1f ms after the agent connected again", name, p, ms(at.Sub(logged.at("connected to"))))
		}
	}
	next := missed + 1
	if err := n.api.PatchConfigMap(n.ctx, "default", "live", liveData(next)); err != nil {
		t.Fatalf("patch configMap live to seq %d: %v", next, err)
	}
	every := make([]int, next+1)
	for i := range every {
		every[i] = i
	}
	for _, name := range livePods {
		r, err := n.waitReader(name, 1, 45*time.Second, seesSeq(next, paths...))
		if err != nil {
			t.Fatalf("pod %s: the patch after the agent restart does not reach the live subPaths: %v", name, err)
		}
		for _, p := range paths {
			if name != "live" {
				break
			}
			if got := r.seqs(p); !slices.Equal(got, every) {
				t.Errorf("pod live: %s read the values %v across the agent restart, want every one of 0..%d in order", p, got, next)
			}
			if r.heldOK[p] != next {
				t.Errorf("pod live: %s: %d of %d descriptors opened before an update read the value before it", p, r.heldOK[p], next)
			}
		}
		if len(r.fails) > 0 || len(r.heldBad) > 0 {
			t.Errorf("pod %s across the agent restart: %d failed reads, %d descriptors opened before an update that read something else; first: %s",
				name, len(r.fails), len(r.heldBad), strings.Join(slices.Concat(r.fails[:min(len(r.fails), 10)], r.heldBad), "\n"))
		}
	}
	return next
}

// liveBenchSync is kubelet's syncFrequency in BenchmarkLiveSubPathLatency (reported as
// kubelet-sync-s): kubelet rewrites a configMap volume only at a pod sync, so its whole-volume
// latency is about this period; kubelet's default is 1m, the harness's 10s. make bench runs
// 2s so that 20 updates take a minute; MOUNTKEEPER_BENCH_KUBELET_SYNC (a Go duration, e.g.
// 1m) measures another period.
func liveBenchSync(b *testing.B) time.Duration {
	v := os.Getenv("MOUNTKEEPER_BENCH_KUBELET_SYNC")
	if v == "" {
		return 2 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("MOUNTKEEPER_BENCH_KUBELET_SYNC=%q: want a positive Go duration such as 1m", v)
	}
	return d
}

// BenchmarkLiveSubPathLatency measures how long a live subPath takes to show an update, from
// the atomic writer's ..data swap (seen on the host with inotify on the pod's volume
// directory) to the container's first read of the new value (p50-ms, p99-ms), beside kubelet's
// own latency for the same configMap mounted whole in the same container: from the API patch
// to the container's first read of the new value through the whole-volume mount
// (kubelet-p50-ms, kubelet-p99-ms; its pod sync period plus its configMap cache). ratio is
// p50-ms / kubelet-p50-ms; live-total-p50-ms is patch to subPath, what a user waits for. One
// iteration is one patch; the reader polls both paths in a tight loop.
func BenchmarkLiveSubPathLatency(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	sync := liveBenchSync(b)
	n := startLiveNode(b, ctx, harness.KubeOptions{SyncFrequency: sync})
	n.runningContainer(n.readerPod("bench", "mk-live", nil, 0, true, "file:"+liveFilePath, "file:"+liveWholePath))
	if _, err := n.waitReader("bench", 1, 30*time.Second, seesSeq(0, liveFilePath, liveWholePath)); err != nil {
		b.Fatalf("the reader did not read the first value: %v", err)
	}
	pod, err := n.api.GetPod(ctx, "default", "bench")
	if err != nil {
		b.Fatal(err)
	}
	volume := filepath.Join(n.kube.RootDir(), "pods", pod.Metadata.UID, "volumes", "kubernetes.io~configmap", "cfg")
	swaps, err := watchDataSwaps(volume, "value")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(swaps.close)

	var live, kube, total []time.Duration
	for seq := 1; b.Loop(); seq++ {
		patched := time.Now()
		if err := n.api.PatchConfigMap(ctx, "default", "live", liveData(seq)); err != nil {
			b.Fatal(err)
		}
		r, err := n.waitReader("bench", 1, max(60*time.Second, 3*sync), seesSeq(seq, liveFilePath, liveWholePath))
		if err != nil {
			b.Fatalf("update %d did not reach the container: %v (volume at seq %d)", seq, err, n.volumeSeq(pod.Metadata.UID, "cfg", "value"))
		}
		swapped, err := swaps.await(seq, 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		sub, ok1 := r.seenAt(liveFilePath, seq)
		whole, ok2 := r.seenAt(liveWholePath, seq)
		if !ok1 || !ok2 {
			b.Fatalf("update %d: the reader skipped it (subPath read %v, whole volume read %v)", seq, r.seqs(liveFilePath), r.seqs(liveWholePath))
		}
		live = append(live, sub.Sub(swapped))
		kube = append(kube, whole.Sub(patched))
		total = append(total, sub.Sub(patched))
	}
	if len(live) == 0 {
		return
	}
	p50, p99, kp50 := percentile(live, 50), percentile(live, 99), percentile(kube, 50)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.ReportMetric(ms(kp50), "kubelet-p50-ms")
	b.ReportMetric(ms(percentile(kube, 99)), "kubelet-p99-ms")
	b.ReportMetric(ms(percentile(total, 50)), "live-total-p50-ms")
	b.ReportMetric(sync.Seconds(), "kubelet-sync-s")
	if kp50 > 0 {
		b.ReportMetric(float64(p50)/float64(kp50), "ratio")
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	return s[max(rank, 1)-1]
}

// mountLayers counts the mounts at path in a mountinfo table.
func mountLayers(mountinfo, path string) int {
	return len(mountIDsAt(mountinfo, path))
}

// mountIDsAt are the mount IDs (first field) of the mounts at path in a mountinfo table, in
// its order.
func mountIDsAt(mountinfo, path string) []string {
	var ids []string
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			ids = append(ids, f[0])
		}
	}
	return ids
}
