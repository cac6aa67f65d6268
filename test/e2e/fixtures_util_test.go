//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// testWriter sends a process's output to the test log, prefixed.
type testWriter struct {
	t      testing.TB
	prefix string
}

func (w testWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Logf("%s: %s", w.prefix, line)
	}
	return len(p), nil
}

// logTimes notes when a process first logs each of some strings.
type logTimes struct {
	mu    sync.Mutex
	first map[string]time.Time
	want  []string
}

func newLogTimes(want ...string) *logTimes {
	return &logTimes{first: map[string]time.Time{}, want: want}
}

func (l *logTimes) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.want {
		if _, ok := l.first[w]; !ok && bytes.Contains(p, []byte(w)) {
			l.first[w] = now
		}
	}
	return len(p), nil
}

// at is when s was first logged (the zero time: not yet).
func (l *logTimes) at(s string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first[s]
}

// harnessPoll calls try every 200ms until it succeeds, ctx ends or timeout passes.
func harnessPoll(ctx context.Context, timeout time.Duration, try func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := try()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// tailFile is the last n bytes of a file, for failure messages.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return path + ":\n" + string(lastBytes(data, n))
}

// grepLines is up to n lines of the file at path that hold substr, for failure messages.
func grepLines(path, substr string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, substr) && len(out) < n {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func containsAllWords(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	return s[max(rank, 1)-1]
}

// dig walks nested maps.
func dig(t testing.TB, obj map[string]any, keys ...string) map[string]any {
	t.Helper()
	cur := obj
	for _, k := range keys {
		next, ok := cur[k].(map[string]any)
		if !ok {
			t.Fatalf("no map at %q in %v", k, keys)
		}
		cur = next
	}
	return cur
}

// readYAML reads every document of a manifest file.
func readYAML(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var objs []map[string]any
	dec := yaml.NewDecoder(f)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if obj != nil {
			objs = append(objs, obj)
		}
	}
}

func freeTCPPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
