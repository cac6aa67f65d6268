package kubeauth

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeReviewer knows tokens and what their users may do, counts its calls, and can hang (an
// API server that accepts connections and never answers) or fail.
type fakeReviewer struct {
	mu      sync.Mutex
	users   map[string]string // token -> user
	allowed map[string]bool   // user -> may get /metrics
	calls   int
	hang    bool
	fail    error
}

func (f *fakeReviewer) Authenticate(ctx context.Context, token string) (User, bool, error) {
	f.mu.Lock()
	f.calls++
	hang, fail := f.hang, f.fail
	name, ok := f.users[token]
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return User{}, false, ctx.Err()
	}
	if fail != nil {
		return User{}, false, fail
	}
	return User{Name: name}, ok, nil
}

func (f *fakeReviewer) Authorize(ctx context.Context, u User, verb, path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return verb == "get" && path == "/metrics" && f.allowed[u.Name], nil
}

func (f *fakeReviewer) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// clock is a settable now, so cache expiry is tested without waiting.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func get(t *testing.T, h http.Handler, token string) int {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

func TestGuardAnswers(t *testing.T) {
	r := &fakeReviewer{users: map[string]string{"good": "prometheus", "nosy": "tenant"}, allowed: map[string]bool{"prometheus": true}}
	var failures []error
	h := Guard(r, Options{Verb: "get", Path: "/metrics", Failed: func(err error) { failures = append(failures, err) }})(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "metrics") }))
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"a token allowed to get /metrics", "good", 200},
		{"a token whose user may not", "nosy", 403},
		{"a token the API server does not know", "forged", 401},
		{"no token", "", 401},
	} {
		if got := get(t, h, tc.token); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	for _, hdr := range []string{"Basic Zm9vOmJhcg==", "Bearer", "Bearer    ", "good"} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Authorization", hdr)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 401 {
			t.Errorf("Authorization %q: %d, want 401", hdr, rec.Code)
		}
	}
	if len(failures) != 0 {
		t.Errorf("failures reported: %v", failures)
	}
}

// TestGuardCaches: a token's answer is remembered for AllowTTL (a refusal for DenyTTL), so
// repeated scrapes do not each cost two reviews; after that it is asked again.
func TestGuardCaches(t *testing.T) {
	r := &fakeReviewer{users: map[string]string{"good": "prometheus", "nosy": "tenant"}, allowed: map[string]bool{"prometheus": true}}
	c := &clock{t: time.Unix(1000, 0)}
	h := Guard(r, Options{Verb: "get", Path: "/metrics", AllowTTL: time.Minute, DenyTTL: 10 * time.Second, now: c.now})(http.NotFoundHandler())
	for range 10 {
		get(t, h, "good")
		get(t, h, "nosy")
	}
	if n := r.callCount(); n != 4 {
		t.Errorf("%d reviews for 20 requests of 2 tokens, want 4 (one TokenReview and one SubjectAccessReview each)", n)
	}
	c.add(30 * time.Second) // the refusal expired, the permission not
	get(t, h, "good")
	get(t, h, "nosy")
	if n := r.callCount(); n != 6 {
		t.Errorf("%d reviews after 30s, want 6", n)
	}
	// Revoked in the meantime: still allowed until the cached answer expires, then refused.
	r.mu.Lock()
	r.allowed["prometheus"] = false
	r.mu.Unlock()
	c.add(31 * time.Second)
	if got := get(t, h, "good"); got != 403 {
		t.Errorf("after the permission was revoked and the cache expired: %d, want 403", got)
	}
}

// TestGuardCacheStaysBounded: endless distinct tokens (reviews not limited here) do not grow
// the refusals' cache past MaxDenied, and the last one is still remembered.
func TestGuardCacheStaysBounded(t *testing.T) {
	r := &fakeReviewer{users: map[string]string{}}
	g := newGuard(r, Options{Verb: "get", Path: "/metrics", MaxDenied: 16, ReviewBurst: 2000})
	h := g.wrap(http.NotFoundHandler())
	for i := range 1000 {
		get(t, h, fmt.Sprintf("token-%d", i))
		g.mu.Lock()
		n := len(g.denied) + len(g.allowed)
		g.mu.Unlock()
		if n > 16 {
			t.Fatalf("%d tokens cached after %d distinct ones, want at most 16", n, i+1)
		}
	}
	before := r.callCount()
	get(t, h, "token-999")
	if r.callCount() != before {
		t.Error("the last token was not cached")
	}
}

// TestGuardAPIServerDown: an API server that does not answer makes a scrape 503 within the
// timeout (never a hang, never the metrics); a failure is not cached, so the scrape after the
// API server is back passes.
func TestGuardAPIServerDown(t *testing.T) {
	r := &fakeReviewer{users: map[string]string{"good": "prometheus"}, allowed: map[string]bool{"prometheus": true}, hang: true}
	var failures []error
	h := Guard(r, Options{Verb: "get", Path: "/metrics", Timeout: 100 * time.Millisecond, Failed: func(err error) { failures = append(failures, err) }})(http.NotFoundHandler())
	done := make(chan int, 1)
	go func() { done <- get(t, h, "good") }()
	select {
	case code := <-done:
		if code != 503 {
			t.Errorf("API server hanging: %d, want 503", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the scrape hangs with the API server")
	}
	if len(failures) != 1 || !errors.Is(failures[0], context.DeadlineExceeded) {
		t.Errorf("failures %v, want one deadline", failures)
	}
	r.mu.Lock()
	r.hang, r.fail = false, errors.New("connection refused")
	r.mu.Unlock()
	if got := get(t, h, "good"); got != 503 {
		t.Errorf("API server refusing connections: %d, want 503", got)
	}
	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	if got := get(t, h, "good"); got != 404 { // passed to the handler
		t.Errorf("API server back: %d, want the handler's 404", got)
	}
}

// TestAPIReviewerIsBounded: the real client against a TLS server that accepts and never
// answers returns within its context's deadline.
func TestAPIReviewerIsBounded(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	a, dir := newTestAPIReviewer(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, _, err := a.Authenticate(ctx, "x"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Authenticate against a silent server: %v, want the deadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Authenticate hangs")
	}
	if _, err := NewAPIReviewer("http://"+srv.Listener.Addr().String(), filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")); err == nil {
		t.Error("an http:// API server was accepted: tokens would travel in clear")
	}
}

// newTestAPIReviewer is the real client of the API server srv plays, with the agent's token
// and srv's CA in the returned dir.
func newTestAPIReviewer(t *testing.T, srv *httptest.Server) (*APIReviewer, string) {
	t.Helper()
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("agent-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := NewAPIReviewer(srv.URL, filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return a, dir
}

// fakeAPIServer plays the API server's TokenReview and SubjectAccessReview endpoints (the API
// server cannot run in a unit test): it knows one token, whose user may get /metrics, and
// counts the reviews it answers and how many it answered at once at most.
type fakeAPIServer struct {
	token, user string
	mu          sync.Mutex
	reviews     map[string]int // by kind
	running     int
	maxRunning  int
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Kind string
		Spec struct {
			Token                 string
			User                  string
			NonResourceAttributes struct{ Path, Verb string }
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.reviews[req.Kind]++
	f.running++
	f.maxRunning = max(f.maxRunning, f.running)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.running--; f.mu.Unlock() }()
	time.Sleep(2 * time.Millisecond) // an API server takes a while: concurrent reviews overlap
	status := map[string]any{}
	switch req.Kind {
	case "TokenReview":
		if req.Spec.Token == f.token {
			status["authenticated"], status["user"] = true, map[string]any{"username": f.user}
		}
	case "SubjectAccessReview":
		a := req.Spec.NonResourceAttributes
		status["allowed"] = req.Spec.User == f.user && a.Verb == "get" && a.Path == "/metrics"
	}
	json.NewEncoder(w).Encode(map[string]any{"status": status})
}

func (f *fakeAPIServer) count(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reviews[kind]
}

// TestGuardUnknownTokenFlood: 1,000 requests with made-up tokens, 50 at once, against the real
// client and an API server played by an HTTPS server, cost a bounded number of TokenReviews
// (ReviewBurst, at most ReviewsInFlight at once; the rest get 429 or a remembered 401), and
// the real scraper is still served from its cached answer; once that answer expires it is
// checked again and served although the flood has used up the unknown tokens' reviews.
func TestGuardUnknownTokenFlood(t *testing.T) {
	api := &fakeAPIServer{token: "scraper-token", user: "system:serviceaccount:monitoring:prometheus", reviews: map[string]int{}}
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	reviewer, _ := newTestAPIReviewer(t, srv)
	c := &clock{t: time.Unix(1000, 0)} // frozen: no review budget comes back during a flood
	h := Guard(reviewer, Options{Verb: "get", Path: "/metrics", now: c.now})(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "metrics") }))
	if got := get(t, h, "scraper-token"); got != 200 {
		t.Fatalf("the scraper before the flood: %d, want 200", got)
	}
	flood := func(round int) map[int]int {
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		next := make(chan int)
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					code := get(t, h, fmt.Sprintf("forged-%d-%d", round, i))
					mu.Lock()
					codes[code]++
					mu.Unlock()
				}
			}()
		}
		for i := range 1000 {
			next <- i
		}
		close(next)
		wg.Wait()
		return codes
	}
	codes := flood(1)
	t.Logf("1,000 made-up tokens: answers %v, %d TokenReviews in all", codes, api.count("TokenReview"))
	if n := api.count("TokenReview"); n > 1+5 {
		t.Errorf("%d TokenReviews for 1 scraper and 1,000 made-up tokens (answers %v), want at most %d", n, codes, 1+5)
	}
	if codes[200] != 0 || codes[401]+codes[429] != 1000 {
		t.Errorf("the flood got %v, want 401 and 429 only", codes)
	}
	before := api.count("TokenReview") + api.count("SubjectAccessReview")
	if got := get(t, h, "scraper-token"); got != 200 {
		t.Errorf("the scraper after the flood: %d, want 200", got)
	}
	if after := api.count("TokenReview") + api.count("SubjectAccessReview"); after != before {
		t.Errorf("the scraper's answer was evicted by the flood: %d more reviews, want it served from the cache", after-before)
	}
	c.add(2 * time.Minute) // the scraper's answer expired; the flood goes on
	flood(2)
	if got := get(t, h, "scraper-token"); got != 200 {
		t.Errorf("the scraper once its answer expired, during a flood: %d, want 200", got)
	}
	if n := api.count("TokenReview"); n > 1+5+5+1 {
		t.Errorf("%d TokenReviews after two floods, want at most %d", n, 1+5+5+1)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.maxRunning > 2 {
		t.Errorf("%d reviews at once, want at most ReviewsInFlight (2)", api.maxRunning)
	}
}
