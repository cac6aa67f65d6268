// Package bounded waits a bounded time for calls that may hang in the kernel: a stat, statx or
// open below a dead network filesystem cannot be interrupted, so the caller must stop waiting
// instead. A call that overruns is left to finish on its own goroutine and its result dropped.
//
// Such a goroutine holds an OS thread for as long as the filesystem stays dead, so the calls
// are also bounded in number (Group): at most one outstanding call per key (a host path, or
// the server of a kernel client's mounts) once it has overrun, at most a fixed number
// outstanding overall. A caller past either bound fails
// at once. A panic in a call becomes a *PanicError instead of ending the process.
package bounded

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// MaxOutstanding bounds the calls of Default still running at any time, answered or not: each
// one stuck below a dead filesystem holds an OS thread.
const MaxOutstanding = 16

// Default is the group the node's host checks share.
var Default = NewGroup(MaxOutstanding)

// Key says what a call touches and which calls are the same.
type Key struct {
	// Paths the call touches: while a call has overrun a caller's wait (it is stuck), no new
	// call touching any of them starts.
	Paths []string
	// Call identifies the call: a call with the same Call still running is joined instead
	// of started again. "": never joined.
	Call string
	// Server is what the call waits on beyond its paths, shared with calls touching other
	// paths: a kernel client's server, whose every mount hangs when it dies. While a call has
	// overrun a caller's wait, no new call with the same Server starts either. "": none.
	Server string
	// Tag is what the call is counted under while it is stuck (Group.Stuck): its server,
	// whether or not calls wait on it together. "": counted under "".
	Tag string
}

// Group bounds the calls that run in it.
type Group struct {
	max int

	mu          sync.Mutex
	inFlight    map[string]*call // by Key.Call
	stuck       map[string]*call // by each Key.Paths of a call that overran a caller's wait
	servers     map[string]*call // by Key.Server of a call that overran a caller's wait
	running     map[string]*call // by Key.Server of the call running (one at a time)
	overran     map[*call]bool   // the calls that overran a caller's wait and still run
	outstanding int
}

type call struct {
	key   Key
	start time.Time
	done  chan struct{}
	stuck chan struct{} // closed when it overruns a caller's wait
	v     any
	err   error
}

// NewGroup returns a group that runs at most max calls at a time.
func NewGroup(max int) *Group {
	return &Group{max: max, inFlight: map[string]*call{}, stuck: map[string]*call{},
		servers: map[string]*call{}, running: map[string]*call{}, overran: map[*call]bool{}}
}

// Stuck counts the calls that overran a caller's wait and still run (each holds an OS thread,
// in uninterruptible sleep below a dead filesystem), by Key.Tag.
func (g *Group) Stuck() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for c := range g.overran {
		out[c.key.Tag]++
	}
	return out
}

// Outstanding is the number of calls still running.
func (g *Group) Outstanding() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.outstanding
}

// Do runs f and waits at most d for it. key says what f touches:
//   - a call with the same key.Call already running is joined, not started again;
//   - while a call touching any of key.Paths has overrun a caller's wait (it is stuck), Do
//     fails at once with the same "no answer" message, starting nothing;
//   - calls with the same key.Server run one at a time: a caller waits its turn (beyond d:
//     the call before it answers or overruns within its own d), then waits d for its own;
//     while one is stuck, Do fails at once with a "no answer" naming the server and how long
//     that call has been stuck, starting nothing;
//   - with the group's max calls outstanding, Do fails at once.
//
// A call that overruns is left to finish on its own goroutine (a hung stat cannot be cancelled)
// and its result dropped. A d of zero or less runs f inline, unbounded: for callers that bound
// a larger whole. A panic in f is returned as a *PanicError.
func Do[T any](g *Group, d time.Duration, key Key, what string, f func() (T, error)) (T, error) {
	var zero T
	run := func() (v any, err error) {
		defer func() {
			if r := recover(); r != nil {
				v, err = nil, &PanicError{What: what, Value: r, Stack: debug.Stack()}
			}
		}()
		return f()
	}
	if d <= 0 {
		v, err := run()
		t, _ := v.(T)
		return t, err
	}
	g.mu.Lock()
	var c *call
	for c == nil {
		for _, k := range key.Paths {
			if g.stuck[k] != nil {
				g.mu.Unlock()
				return zero, noAnswer(what, d)
			}
		}
		if s := g.servers[key.Server]; key.Server != "" && s != nil {
			g.mu.Unlock()
			return zero, fmt.Errorf("%s: %w: an earlier call waiting on %s has had none for %s (is the server dead?)",
				what, ErrNoAnswer, key.Server, time.Since(s.start).Round(time.Second))
		}
		if j := g.inFlight[key.Call]; j != nil && key.Call != "" {
			c = j
			break
		}
		if r := g.running[key.Server]; key.Server != "" && r != nil {
			// Calls waiting on one server run one at a time: were they started together
			// (a prober's tick) on a server that just died, each would be left stuck. This
			// one waits its turn, holding no thread: until the one running answers (then
			// this one starts, with d of its own: a slow server that answers still passes),
			// or overruns its caller's wait (then this one is refused above).
			g.mu.Unlock()
			select {
			case <-r.done:
			case <-r.stuck:
			}
			g.mu.Lock()
			continue
		}
		if g.outstanding >= g.max {
			n := g.outstanding
			g.mu.Unlock()
			return zero, fmt.Errorf("%s: not started: %d earlier checks are still without an answer (is a network filesystem dead?)", what, n)
		}
		c = &call{key: key, start: time.Now(), done: make(chan struct{}), stuck: make(chan struct{})}
		g.outstanding++
		if key.Call != "" {
			g.inFlight[key.Call] = c
		}
		if key.Server != "" {
			g.running[key.Server] = c
		}
		go g.finish(c, run)
	}
	g.mu.Unlock()

	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-c.done:
		v, _ := c.v.(T)
		return v, c.err
	case <-timer.C:
		g.mu.Lock()
		select {
		case <-c.done:
		default:
			for _, k := range c.key.Paths {
				g.stuck[k] = c
			}
			if c.key.Server != "" {
				g.servers[c.key.Server] = c
			}
			if !g.overran[c] {
				g.overran[c] = true
				close(c.stuck)
			}
		}
		g.mu.Unlock()
		return zero, noAnswer(what, d)
	}
}

func (g *Group) finish(c *call, run func() (any, error)) {
	v, err := run()
	g.mu.Lock()
	c.v, c.err = v, err
	g.outstanding--
	if c.key.Call != "" && g.inFlight[c.key.Call] == c {
		delete(g.inFlight, c.key.Call)
	}
	for _, k := range c.key.Paths {
		if g.stuck[k] == c {
			delete(g.stuck, k)
		}
	}
	if g.servers[c.key.Server] == c {
		delete(g.servers, c.key.Server)
	}
	if g.running[c.key.Server] == c {
		delete(g.running, c.key.Server)
	}
	delete(g.overran, c)
	close(c.done)
	g.mu.Unlock()
}

// ErrNoAnswer is wrapped by the error of a call that did not answer in time.
var ErrNoAnswer = errors.New("no answer")

func noAnswer(what string, d time.Duration) error {
	return fmt.Errorf("%s: %w within %s (is a network filesystem on the path dead?)", what, ErrNoAnswer, d)
}

// PanicError is a call that panicked.
type PanicError struct {
	What  string
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("%s: panic: %v", e.What, e.Value) }
