//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
			t.Fatalf("live subPath updates are not in this build of mountkeeper (%s): "+
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

// swapWatch records when kubelet's atomic writer swaps a volume's ..data symlink (the rename
// of ..data_tmp onto it), by the seq the volume's key holds right after the swap.
type swapWatch struct {
	f    *os.File
	done chan struct{}
	mu   sync.Mutex
	at   map[int]time.Time
	err  error
}

// watchDataSwaps watches dir (a configMap volume's directory on the host) with inotify until
// close; each ..data swap is stamped with the time its event is read and the seq of dir/key.
func watchDataSwaps(dir, key string) (*swapWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	// Non-blocking: the runtime's poller waits for it, and Close ends a pending Read.
	w := &swapWatch{f: os.NewFile(uintptr(fd), "inotify"), done: make(chan struct{}), at: map[int]time.Time{}}
	go w.run(dir, key)
	return w, nil
}

func (w *swapWatch) run(dir, key string) {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			return
		}
		now := time.Now()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+nameLen], "\x00"))
			off += unix.SizeofInotifyEvent + nameLen
			if name != "..data" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, "..data", key))
			if err != nil || len(b) < 6 {
				continue
			}
			if seq, err := strconv.Atoi(string(b[:6])); err == nil {
				w.mu.Lock()
				if _, ok := w.at[seq]; !ok {
					w.at[seq] = now
				}
				w.mu.Unlock()
			}
		}
	}
}

// await returns when the swap to seq happened, waiting for it up to timeout.
func (w *swapWatch) await(seq int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		at, ok := w.at[seq]
		err := w.err
		w.mu.Unlock()
		switch {
		case ok:
			return at, nil
		case err != nil:
			return time.Time{}, fmt.Errorf("inotify: %w", err)
		case time.Now().After(deadline):
			return time.Time{}, fmt.Errorf("no ..data swap to seq %d seen within %s", seq, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// close stops the watch and waits for its goroutine.
func (w *swapWatch) close() {
	w.f.Close()
	<-w.done
}
