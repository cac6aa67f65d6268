package bounded

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBoundedTimesOut(t *testing.T) {
	block := make(chan struct{})
	defer close(block) // let the abandoned call finish
	v, err := Do(Default, 10*time.Millisecond, Key{}, "stat /nfs/dead", func() (int, error) {
		<-block
		return 42, nil
	})
	if err == nil {
		t.Fatalf("bounded returned %d for a call that never answers, want an error", v)
	}
	if want := "stat /nfs/dead: no answer within 10ms (is a network filesystem on the path dead?)"; err.Error() != want {
		t.Errorf("bounded error\ngot:  %s\nwant: %s", err, want)
	}
	if v != 0 {
		t.Errorf("bounded returned %d with its timeout error, want the zero value", v)
	}
}

func TestBoundedPassesResultThrough(t *testing.T) {
	cause := errors.New("boom")
	tests := []struct {
		name    string
		v       int
		err     error
		wantErr error
	}{
		{name: "value", v: 42},
		{name: "error", v: 7, err: cause, wantErr: cause},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The timeout is far beyond what the call needs; nothing here depends on timing.
			v, err := Do(Default, time.Hour, Key{}, "x", func() (int, error) { return tt.v, tt.err })
			if v != tt.v || !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("bounded = %d, %v; want %d, %v", v, err, tt.v, tt.wantErr)
			}
		})
	}
}

func TestBoundedWithoutTimeoutRunsInline(t *testing.T) {
	var ran bool
	v, err := Do(Default, 0, Key{}, "inline", func() (int, error) { ran = true; return 7, nil })
	if !ran || v != 7 || err != nil {
		t.Errorf("Do(Default, 0) = %d, %v (ran %v); want 7, nil, run before it returned", v, err, ran)
	}
}

// TestGroupOneStuckCallPerKey: while a call for a key is stuck, later calls touching that key
// fail at once with the same message instead of starting another goroutine (whose thread a
// dead FUSE mount would hold for good).
func TestGroupOneStuckCallPerKey(t *testing.T) {
	g := NewGroup(4)
	block := make(chan struct{})
	defer close(block)
	var started atomic.Int32
	hang := func() (int, error) { started.Add(1); <-block; return 1, nil }
	_, err := Do(g, 10*time.Millisecond, Key{Paths: []string{"/nfs/dead"}}, "stat /nfs/dead", hang)
	want := "stat /nfs/dead: no answer within 10ms (is a network filesystem on the path dead?)"
	if err == nil || err.Error() != want {
		t.Fatalf("first call: %v, want %s", err, want)
	}
	for range 1000 {
		start := time.Now()
		_, err := Do(g, time.Hour, Key{Paths: []string{"/srv/ok", "/nfs/dead"}}, "stat /nfs/dead", hang)
		if err == nil || err.Error() != "stat /nfs/dead: no answer within 1h0m0s (is a network filesystem on the path dead?)" {
			t.Fatalf("call while stuck: %v", err)
		}
		if time.Since(start) > time.Second {
			t.Fatalf("a call for a stuck key waited %s, want an answer at once", time.Since(start))
		}
	}
	if started.Load() != 1 || g.Outstanding() != 1 {
		t.Errorf("started %d calls, %d outstanding; want 1, 1", started.Load(), g.Outstanding())
	}
	// Another key still works.
	if v, err := Do(g, time.Hour, Key{Paths: []string{"/srv/ok"}}, "stat /srv/ok", func() (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Errorf("a call for another key = %d, %v; want 7, nil", v, err)
	}
}

// TestGroupCap: at most max calls outstanding; the next fails at once.
func TestGroupCap(t *testing.T) {
	g := NewGroup(3)
	block := make(chan struct{})
	defer close(block)
	for i := range 3 {
		key := fmt.Sprint("/dead/", i)
		if _, err := Do(g, time.Millisecond, Key{Paths: []string{key}}, "stat "+key, func() (int, error) { <-block; return 0, nil }); err == nil {
			t.Fatal("a hanging call answered")
		}
	}
	before := runtime.NumGoroutine()
	for i := range 1000 {
		key := fmt.Sprint("/other/", i)
		_, err := Do(g, time.Hour, Key{Paths: []string{key}}, "stat "+key, func() (int, error) { <-block; return 0, nil })
		if err == nil || !strings.Contains(err.Error(), "stat "+key+": not started: 3 earlier checks are still without an answer") {
			t.Fatalf("call beyond the cap: %v", err)
		}
	}
	if g.Outstanding() != 3 || runtime.NumGoroutine() > before+2 {
		t.Errorf("%d outstanding, goroutines %d -> %d; want 3 and no growth", g.Outstanding(), before, runtime.NumGoroutine())
	}
}

// TestGroupJoinsACallInFlight: concurrent calls for the same keys share one call.
func TestGroupJoinsACallInFlight(t *testing.T) {
	g := NewGroup(4)
	release := make(chan struct{})
	var calls atomic.Int32
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := Do(g, time.Hour, Key{Paths: []string{"/srv/a"}, Call: "stat /srv/a"}, "stat /srv/a", func() (int, error) { calls.Add(1); <-release; return 5, nil })
			if v != 5 || err != nil {
				t.Errorf("joined call = %d, %v", v, err)
			}
		}()
	}
	for g.Outstanding() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	if calls.Load() != 1 {
		t.Errorf("f ran %d times for concurrent calls of one key, want 1", calls.Load())
	}
}

// TestGroupRecoversAPanic: a panic in the call becomes an error (with the stack), not a crash.
func TestGroupRecoversAPanic(t *testing.T) {
	for _, d := range []time.Duration{0, time.Hour} {
		_, err := Do(NewGroup(1), d, Key{Paths: []string{"k"}}, "stat /x", func() (int, error) { panic("boom") })
		var pe *PanicError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "stat /x: panic: boom") || !strings.Contains(string(pe.Stack), "bounded") {
			t.Errorf("Do(%s) of a panicking call = %v, want a *PanicError", d, err)
		}
	}
}

// TestGroupOneStuckCallPerServer: while a call waiting on a server is stuck, a call touching
// another path but the same server fails at once naming the server, and is counted nowhere; a
// call without a server, or with another, still runs. Stuck counts the stuck calls by tag
// until they finish.
func TestGroupOneStuckCallPerServer(t *testing.T) {
	g := NewGroup(8)
	block := make(chan struct{})
	var started atomic.Int32
	hang := func() (int, error) { started.Add(1); <-block; return 1, nil }
	a := Key{Paths: []string{"/m/a"}, Server: "filer:2049@10.0.0.1", Tag: "filer:2049"}
	if _, err := Do(g, 10*time.Millisecond, a, "stat /m/a", hang); !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("first call: %v, want no answer", err)
	}
	b := Key{Paths: []string{"/m/b"}, Server: a.Server, Tag: a.Tag}
	for range 100 {
		// A short wait, so that a call started (the bound broken) fails on its message, not
		// by hanging.
		_, err := Do(g, 20*time.Millisecond, b, "stat /m/b", hang)
		if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "stat /m/b: no answer: an earlier call waiting on filer:2049@10.0.0.1 has had none for") {
			t.Fatalf("call for the same server while one is stuck: %v", err)
		}
	}
	// A FUSE mount of the same server (a daemon of its own): tagged, not gated.
	fuse := Key{Paths: []string{"/m/c"}, Tag: a.Tag}
	if _, err := Do(g, 10*time.Millisecond, fuse, "stat /m/c", hang); !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("a call of another mount without a server was not started: %v", err)
	}
	other := Key{Paths: []string{"/m/d"}, Server: "filer:2049@10.0.0.2", Tag: a.Tag}
	if v, err := Do(g, time.Hour, other, "stat /m/d", func() (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Errorf("a call for the server at another address = %d, %v; want 7, nil", v, err)
	}
	if got := g.Stuck(); len(got) != 1 || got["filer:2049"] != 2 || started.Load() != 2 {
		t.Errorf("stuck %v after 2 calls started (%d), want map[filer:2049:2]", got, started.Load())
	}
	close(block)
	deadline := time.Now().Add(10 * time.Second)
	for len(g.Stuck()) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := g.Stuck(); len(got) != 0 {
		t.Errorf("stuck %v once every call finished, want none", got)
	}
	if v, err := Do(g, time.Hour, b, "stat /m/b", func() (int, error) { return 5, nil }); v != 5 || err != nil {
		t.Errorf("a call for the server once its stuck call finished = %d, %v; want 5, nil", v, err)
	}
}

// TestGroupServerCallsOneAtATime: calls on one server started together (a prober's tick on
// a server that just died) run one at a time: one is left stuck, the others are refused
// without starting.
func TestGroupServerCallsOneAtATime(t *testing.T) {
	g := NewGroup(8)
	block := make(chan struct{})
	defer close(block)
	var started atomic.Int32
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := Key{Paths: []string{fmt.Sprint("/m/", i)}, Server: "filer:2049", Tag: "filer:2049"}
			if _, err := Do(g, 50*time.Millisecond, key, "stat", func() (int, error) { started.Add(1); <-block; return 0, nil }); !errors.Is(err, ErrNoAnswer) {
				t.Errorf("call %d on the dead server: %v, want no answer", i, err)
			}
		}()
	}
	wg.Wait()
	if started.Load() != 1 || g.Stuck()["filer:2049"] != 1 {
		t.Errorf("%d calls started, stuck %v; want 1 and 1", started.Load(), g.Stuck())
	}
}

// TestGroupSlowServerAnswers: calls on one server that each answer within d, started
// together, all answer, though in turn they take longer than d in all: a slow server that
// answers is not taken for dead.
func TestGroupSlowServerAnswers(t *testing.T) {
	g := NewGroup(8)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := Key{Paths: []string{fmt.Sprint("/m/", i)}, Server: "filer:2049"}
			if v, err := Do(g, 200*time.Millisecond, key, "stat", func() (int, error) { time.Sleep(100 * time.Millisecond); return 1, nil }); v != 1 || err != nil {
				t.Errorf("call %d on a slow server = %d, %v; want 1, nil", i, v, err)
			}
		}()
	}
	wg.Wait()
}
