package nri

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/ops"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// stuckMounter is a Mounter whose Release waits until the test lets it go: a request that
// cannot answer, as one waiting on a hung mount would.
type stuckMounter struct {
	*fakeMounter
	entered, release chan struct{}
}

func (m *stuckMounter) Release(user string) {
	close(m.entered)
	<-m.release
	m.fakeMounter.Release(user)
}

// testClock is a clock the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestHealthzRequestStuck: /healthz (liveness) answers 200 while the plugin answers its
// requests; a RemoveContainer held past RequestBudget (its Mounter waits, as on a hung mount)
// makes it 503 with the request's kind and age; once it returns, 200 again.
func TestHealthzRequestStuck(t *testing.T) {
	m := &stuckMounter{fakeMounter: &fakeMounter{users: map[string]bool{}}, entered: make(chan struct{}), release: make(chan struct{})}
	p := NewPlugin(mustConfig(t, networkTestConfig), true, &specmodtest.Host{}, quietLogger(), WithMounter(
		func(*configs.Config) (Mounter, error) { return m, nil }))
	clock := &testClock{now: time.Unix(1_700_000_000, 0)}
	p.requests.now = clock.Now
	if _, err := p.Configure(context.Background(), "", "test", "1"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ops.LocalMux(ops.Handlers{Metrics: http.NotFoundHandler(), Ready: p.Ready, Healthy: p.Healthy, Status: func() any { return nil }}))
	defer srv.Close()
	healthz := func() (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	if code, body := healthz(); code != http.StatusOK {
		t.Fatalf("/healthz of an idle plugin: %d %s", code, body)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.RemoveContainer(context.Background(), &api.PodSandbox{}, &api.Container{Id: "c1"})
	}()
	select {
	case <-m.entered:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("RemoveContainer never reached the Mounter")
	}
	if code, body := healthz(); code != http.StatusOK {
		t.Errorf("/healthz with a request just begun: %d %s, want 200", code, body)
	}
	clock.add(RequestBudget + 1500*time.Millisecond)
	code, body := healthz()
	t.Logf("/healthz with RemoveContainer stuck: %d %s", code, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "RemoveContainer") || !strings.Contains(body, "3.5s") {
		t.Errorf("/healthz with RemoveContainer stuck for 3.5s: %d %q, want 503 naming RemoveContainer and 3.5s", code, body)
	}
	close(m.release)
	<-done
	if code, body := healthz(); code != http.StatusOK {
		t.Errorf("/healthz once the request returned: %d %s, want 200", code, body)
	}
}

// TestInflightSlots: more requests of one kind than slots run untracked, and a slot is
// reused once its request ends.
func TestInflightSlots(t *testing.T) {
	var f inflight
	clock := &testClock{now: time.Unix(1_700_000_000, 0)}
	f.now = clock.Now
	var slots []int
	for range inflightSlots + 1 {
		slots = append(slots, f.begin(reqStopContainer))
	}
	if slots[inflightSlots] != -1 {
		t.Errorf("request %d of one kind got slot %d, want -1 (untracked)", inflightSlots+1, slots[inflightSlots])
	}
	for _, s := range slots {
		f.end(reqStopContainer, s)
	}
	if s := f.begin(reqCreateContainer); s != 0 {
		t.Errorf("slot %d after every request ended, want 0", s)
	}
	clock.add(time.Hour)
	if err := f.stuck(RequestBudget); err == nil || !strings.Contains(err.Error(), "CreateContainer") {
		t.Errorf("stuck = %v, want CreateContainer named", err)
	}
}

func BenchmarkInflight(b *testing.B) {
	var f inflight
	b.ReportAllocs()
	for range b.N {
		f.end(reqCreateContainer, f.begin(reqCreateContainer))
	}
}
