package ops

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestServeRetrying: a free address is served at once; one held by another listener is
// tried again until it is free and then served; one held until ctx ends is never served and
// ServeRetrying returns; an error of serve is logged and not retried.
func TestServeRetrying(t *testing.T) {
	tests := []struct {
		name       string
		held       bool // another listener holds the address at start
		freeAfter  int  // with held: close it after this many warnings (0: never)
		serveErr   error
		wantServed int
		wantWarned bool
		wantError  string // in the error log
	}{
		{name: "free address is served at once", wantServed: 1},
		{name: "held address is served once freed", held: true, freeAfter: 2, wantServed: 1, wantWarned: true},
		{name: "held until the end is never served", held: true, wantWarned: true},
		{name: "an error of serve is logged, not retried", serveErr: errors.New("boom"), wantServed: 1, wantError: "boom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			blocker, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			address := blocker.Addr().String()
			if !tc.held {
				blocker.Close()
			} else {
				defer blocker.Close()
			}
			log, hook := logtest.NewNullLogger()
			warned := make(chan struct{}, 100)
			log.AddHook(signalHook{level: logrus.WarnLevel, c: warned})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			served := make(chan string, 10)
			done := make(chan struct{})
			go func() {
				defer close(done)
				serveRetrying(ctx, address, func(l net.Listener) error {
					served <- l.Addr().String()
					l.Close()
					return tc.serveErr
				}, log, 10*time.Millisecond)
			}()
			wait := func(c <-chan struct{}, what string) {
				t.Helper()
				select {
				case <-c:
				case <-time.After(10 * time.Second):
					t.Fatalf("no %s within 10s", what)
				}
			}
			switch {
			case tc.held && tc.freeAfter > 0:
				for range tc.freeAfter {
					wait(warned, "retry warning")
				}
				blocker.Close()
			case tc.held:
				wait(warned, "retry warning")
				wait(warned, "second retry warning")
				cancel()
			}
			wait(done, "return of ServeRetrying")
			close(served)
			n := 0
			for got := range served {
				n++
				if got != address {
					t.Errorf("served on %s, want %s", got, address)
				}
			}
			if n != tc.wantServed {
				t.Errorf("served %d times, want %d", n, tc.wantServed)
			}
			var warnings, errs []string
			for _, e := range hook.AllEntries() {
				switch e.Level {
				case logrus.WarnLevel:
					warnings = append(warnings, e.Message)
				case logrus.ErrorLevel:
					errs = append(errs, e.Message)
				}
			}
			if (len(warnings) > 0) != tc.wantWarned {
				t.Errorf("warnings %q, want some: %v", warnings, tc.wantWarned)
			}
			for _, w := range warnings {
				if !strings.Contains(w, address) || !strings.Contains(w, "retrying") {
					t.Errorf("warning %q does not name the address and the retry", w)
				}
			}
			if got := strings.Join(errs, "\n"); tc.wantError == "" && got != "" || !strings.Contains(got, tc.wantError) {
				t.Errorf("errors logged %q, want %q", got, tc.wantError)
			}
		})
	}
}

// signalHook sends on c for every entry of level.
type signalHook struct {
	level logrus.Level
	c     chan struct{}
}

func (h signalHook) Levels() []logrus.Level { return []logrus.Level{h.level} }

func (h signalHook) Fire(*logrus.Entry) error {
	select {
	case h.c <- struct{}{}:
	default: // the test has seen enough
	}
	return nil
}
