// Package kubeauth lets only callers that Kubernetes authorizes read an endpoint, as
// kube-rbac-proxy does: the caller's bearer token is checked with a TokenReview, and what its
// user may do with a SubjectAccessReview (verb get on a non-resource URL such as /metrics),
// both asked of the API server as the agent's own ServiceAccount.
//
// An answer is cached for a short while, so that a scrape every 15s does not cost the API
// server two requests each time; each call to the API server is bounded, and while it cannot
// answer (down, slow, the agent's own rights missing) the caller gets 503, never a hang and
// never the endpoint.
//
// Whoever reaches the port may send tokens, so what an unauthenticated caller can cost is
// bounded too: tokens not known to be allowed are reviewed at most a few at once and a few
// per second (past that: 429, no review), and refusals are remembered apart from the allowed
// tokens, in a smaller cache, so a flood of made-up tokens never evicts a real scraper's
// answer. A token that was allowed is reviewed again, when its answer expires, within a
// bound of its own, which made-up tokens cannot use up.
package kubeauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// User is who a token belongs to, as a TokenReview tells.
type User struct {
	Name   string              `json:"username"`
	UID    string              `json:"uid,omitempty"`
	Groups []string            `json:"groups,omitempty"`
	Extra  map[string][]string `json:"extra,omitempty"`
}

// Reviewer asks the API server (APIReviewer) who a token is and what its user may do.
type Reviewer interface {
	// Authenticate returns the token's user; ok is false when the API server does not accept
	// the token. err means it could not tell.
	Authenticate(ctx context.Context, token string) (u User, ok bool, err error)
	// Authorize says whether u may do verb on the non-resource path; err means it could not
	// tell.
	Authorize(ctx context.Context, u User, verb, path string) (allowed bool, err error)
}

// Options bound and cache the reviews.
type Options struct {
	Verb, Path string        // what the caller must be allowed: e.g. get /metrics
	Timeout    time.Duration // each review; default 5s
	AllowTTL   time.Duration // how long an allowed token is remembered; default 1m
	DenyTTL    time.Duration // how long a refused token is remembered; default 10s
	MaxEntries int           // allowed tokens remembered at most; default 256
	MaxDenied  int           // refused tokens remembered at most; default 64
	// Reviews of tokens not known to be allowed: at most ReviewsInFlight at once (default 2),
	// ReviewBurst in a row (default 5), then one per ReviewEvery (default 1s). Tokens that
	// were allowed are reviewed again at most ReviewsInFlight at once, apart.
	ReviewsInFlight int
	ReviewBurst     int
	ReviewEvery     time.Duration
	// Failed is told why a review could not be made (the caller got 503); may be nil.
	Failed func(error)
	now    func() time.Time // tests
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.AllowTTL <= 0 {
		o.AllowTTL = time.Minute
	}
	if o.DenyTTL <= 0 {
		o.DenyTTL = 10 * time.Second
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 256
	}
	if o.MaxDenied <= 0 {
		o.MaxDenied = 64
	}
	if o.ReviewsInFlight <= 0 {
		o.ReviewsInFlight = 2
	}
	if o.ReviewBurst <= 0 {
		o.ReviewBurst = 5
	}
	if o.ReviewEvery <= 0 {
		o.ReviewEvery = time.Second
	}
	if o.Failed == nil {
		o.Failed = func(error) {}
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o
}

// verdict is what a token gets: an HTTP status (200 passes) and the message of a refusal.
type verdict struct {
	code    int
	message string
	expires time.Time
}

// Guard returns a middleware that lets through only requests whose bearer token r
// authenticates and whose user may do o.Verb on o.Path.
func Guard(r Reviewer, o Options) func(http.Handler) http.Handler {
	return newGuard(r, o).wrap
}

func newGuard(r Reviewer, o Options) *guard {
	o = o.withDefaults()
	return &guard{r: r, o: o, allowed: map[tokenHash]verdict{}, denied: map[tokenHash]verdict{},
		fresh: newReviewLimit(o.ReviewsInFlight, o.ReviewBurst, o.ReviewEvery),
		known: newReviewLimit(o.ReviewsInFlight, 0, 0)}
}

func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, ok := bearer(req)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mountkeeper"`)
			http.Error(w, "Unauthorized: a bearer token is required (a ServiceAccount token allowed to get "+g.o.Path+")", http.StatusUnauthorized)
			return
		}
		v := g.check(req.Context(), token)
		if v.code != http.StatusOK {
			switch v.code {
			case http.StatusUnauthorized:
				w.Header().Set("WWW-Authenticate", `Bearer realm="mountkeeper"`)
			case http.StatusTooManyRequests:
				w.Header().Set("Retry-After", "1")
			}
			http.Error(w, v.message, v.code)
			return
		}
		next.ServeHTTP(w, req)
	})
}

type guard struct {
	r Reviewer
	o Options
	// The caches are by the token's hash: no token is kept. allowed holds the tokens whose last
	// answer was 200, expired ones too (they are "known": reviewed again under known's bound);
	// only a token the API server accepts and whose user is allowed gets in. denied holds
	// refusals, which anyone can make.
	mu      sync.Mutex
	allowed map[tokenHash]verdict
	denied  map[tokenHash]verdict
	fresh   *reviewLimit // reviews of tokens not in allowed
	known   *reviewLimit // reviews of tokens in allowed whose answer expired
}

type tokenHash = [sha256.Size]byte

func bearer(req *http.Request) (string, bool) {
	h := req.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// check returns the token's verdict, from the caches or from fresh reviews, or 429 when the
// reviews' bound is reached.
func (g *guard) check(ctx context.Context, token string) verdict {
	key := sha256.Sum256([]byte(token))
	now := g.o.now()
	g.mu.Lock()
	v, known := g.allowed[key]
	if known && now.Before(v.expires) {
		g.mu.Unlock()
		return v
	}
	if v, ok := g.denied[key]; ok && now.Before(v.expires) {
		g.mu.Unlock()
		return v
	}
	limit := g.fresh
	if known {
		limit = g.known
	}
	if !limit.take(now) {
		g.mu.Unlock()
		return verdict{code: http.StatusTooManyRequests, message: "Too Many Requests: too many unknown tokens to check with the Kubernetes API server now; try again"}
	}
	g.mu.Unlock()
	v = g.review(ctx, token)
	g.mu.Lock()
	defer g.mu.Unlock()
	limit.done()
	switch v.code {
	case http.StatusServiceUnavailable:
		return v // not an answer: asked again next time
	case http.StatusOK:
		v.expires = now.Add(g.o.AllowTTL)
		delete(g.denied, key)
		if _, ok := g.allowed[key]; !ok {
			evictOne(g.allowed, g.o.MaxEntries, now)
		}
		g.allowed[key] = v
	default:
		v.expires = now.Add(g.o.DenyTTL)
		delete(g.allowed, key) // revoked: no longer known
		if _, ok := g.denied[key]; !ok {
			evictOne(g.denied, g.o.MaxDenied, now)
		}
		g.denied[key] = v
	}
	return v
}

// evictOne makes room for one more entry in cache, which holds at most max: it drops the
// expired entries, or else the one that expires first.
func evictOne(cache map[tokenHash]verdict, max int, now time.Time) {
	if len(cache) < max {
		return
	}
	var first tokenHash
	var firstExpires time.Time
	for k, v := range cache {
		if !now.Before(v.expires) {
			delete(cache, k)
		} else if firstExpires.IsZero() || v.expires.Before(firstExpires) {
			first, firstExpires = k, v.expires
		}
	}
	if len(cache) >= max {
		delete(cache, first)
	}
}

func (g *guard) review(ctx context.Context, token string) verdict {
	ctx, cancel := context.WithTimeout(ctx, g.o.Timeout)
	defer cancel()
	u, ok, err := g.r.Authenticate(ctx, token)
	if err != nil {
		return g.unavailable(fmt.Errorf("TokenReview: %w", err))
	}
	if !ok {
		return verdict{code: http.StatusUnauthorized, message: "Unauthorized: the API server does not accept this token"}
	}
	allowed, err := g.r.Authorize(ctx, u, g.o.Verb, g.o.Path)
	if err != nil {
		return g.unavailable(fmt.Errorf("SubjectAccessReview for %s: %w", u.Name, err))
	}
	if !allowed {
		return verdict{code: http.StatusForbidden, message: fmt.Sprintf("Forbidden: user %q may not %s %s (grant it a ClusterRole with nonResourceURLs [%s], verbs [%s])", u.Name, g.o.Verb, g.o.Path, g.o.Path, g.o.Verb)}
	}
	return verdict{code: http.StatusOK}
}

func (g *guard) unavailable(err error) verdict {
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (no answer within %s)", err, g.o.Timeout)
	}
	g.o.Failed(err)
	return verdict{code: http.StatusServiceUnavailable, message: "Service Unavailable: cannot check the token with the Kubernetes API server now; try again"}
}
