package netmount

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// The runtime creates the containers of a whole node under one lock while its plugin answers:
// Acquire may wait only for a mount's first attempt, briefly; a mount still not
// there after that, or one whose attempt failed, is refused at once.
func TestAcquireWaitsOnlyForTheFirstAttempt(t *testing.T) {
	const firstWait = 200 * time.Millisecond
	sys := newFakeSystem()
	release := sys.holdMounts() // a server that accepts the connection and never answers
	m := newTestManager(t, sys, Config{FirstWait: firstWait})

	start := time.Now()
	_, err := acquire(t, m, 5*time.Second, testSpec, "ctr-a")
	first := time.Since(start)
	if err == nil || !strings.HasPrefix(err.Error(), testSpec.String()+": not ready: still mounting (attempt 1, started ") {
		t.Fatalf("first Acquire of a hung mount = %v, want still mounting", err)
	}
	if first < firstWait {
		t.Errorf("first Acquire returned after %s, before FirstWait %s", first, firstWait)
	}
	// Lower bound of the hint: it names the server and what to check.
	for _, want := range []string{"the server 10.0.0.1:22 has not answered yet", "check that it is up", "goes on in the background"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}

	// Every later container is answered at once, however long its own deadline.
	for _, u := range []string{"ctr-b", "ctr-c", "ctr-d"} {
		start := time.Now()
		_, err := acquire(t, m, 5*time.Second, testSpec, u)
		if took := time.Since(start); took >= firstWait {
			t.Errorf("Acquire(%s) of a mount known to hang waited %s (FirstWait %s): it must answer at once", u, took, firstWait)
		}
		if err == nil || !strings.Contains(err.Error(), "still mounting (attempt 1") {
			t.Errorf("Acquire(%s) = %v, want still mounting", u, err)
		}
	}
	if st, _ := statusOf(m, testSpec.Key()); len(st.Users) != 0 {
		t.Errorf("refused containers hold the mount: %v", st.Users)
	}

	close(release) // the server answers: the attempt under way mounts, no restart needed
	target := filepath.Join(m.mountsDir, testSpec.Key())
	eventually(t, "mounted", func() bool { return sys.isMountedNow(target) })
	if _, err := acquireEventually(t, m, 5*time.Second, testSpec, "ctr-e"); err != nil {
		t.Fatalf("Acquire once the server answers: %v", err)
	}
	if n := sys.calls(target); n != 1 {
		t.Errorf("%d mount attempts, want 1", n)
	}
}

func TestAcquireDoesNotWaitForARetry(t *testing.T) {
	const firstWait = 5 * time.Second // longer than any answer here: no wait may use it
	sys := newFakeSystem()
	hold := make(chan struct{})
	defer close(hold)
	sys.mountFn = func(ctx context.Context, _ string, attempt int) error {
		if attempt == 1 {
			return errors.New("read: Connection reset by peer")
		}
		select { // the retry hangs
		case <-hold:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	m := newTestManager(t, sys, Config{FirstWait: firstWait, RetryBackoff: time.Millisecond})
	target := filepath.Join(m.mountsDir, testSpec.Key())
	m.Ensure(testSpec)
	eventually(t, "the retry is under way", func() bool { return sys.calls(target) == 2 })

	start := time.Now()
	_, err := acquire(t, m, 10*time.Second, testSpec, "ctr-a")
	if took := time.Since(start); took >= firstWait {
		t.Errorf("Acquire during a retry waited %s", took)
	}
	if err == nil || !strings.Contains(err.Error(), "not ready: last error: read: Connection reset by peer (attempt 2 under way since ") {
		t.Errorf("Acquire during a retry = %v, want the last error and the attempt under way", err)
	}
}

func TestFirstWaitFollowsTheCreateBudget(t *testing.T) {
	if DefaultFirstWait != 500*time.Millisecond {
		t.Errorf("DefaultFirstWait = %s, want a third of the default createBudget (500ms)", DefaultFirstWait)
	}
}

// TestRefusalNamesTheServer: a claim refused because its mount is still mounting, dead or
// being recovered says which server the node waits for, as host:port, where the spec tells.
func TestRefusalNamesTheServer(t *testing.T) {
	m := &Manager{}
	nfs := netspec.Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=4.2", "hard"}}
	cause := errors.New("dead: stat /x: no answer within 2s")
	for _, tc := range []struct {
		name string
		e    *entry
		want string
	}{
		{"mounting for long", &entry{spec: nfs, phase: mounting, since: time.Now().Add(-time.Hour)}, "the server filer:2049 has not answered yet"},
		{"dead", &entry{spec: nfs, phase: dead, lastErr: cause}, "no answer within 2s (the server filer:2049; recovery attempt 0"},
		{"recovering", &entry{spec: nfs, phase: recovering, attempt: 2, lastErr: cause}, "(the server filer:2049; recovery attempt 2"},
		{"a source that names no server", &entry{spec: netspec.Spec{Type: "fuse.rclone", Source: "remote:"}, phase: dead, lastErr: cause}, "no answer within 2s (recovery attempt 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := m.notReadyLocked(tc.e); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refusal %v, want it to say %q", err, tc.want)
			}
		})
	}
}
