package nri

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestCutSynchronizeLeavesNothing restarts the agent on a node of pods with live subPaths
// under a runtime that cuts its Synchronize: the first answers come after the runtime's
// request timeout, so the runtime closes the connection and the agent connects and
// synchronizes again, each cut Synchronize having left its work to the reconciler, as on a
// node too busy to answer in time. Once it is through, every live path is followed once.
// Then every pod goes: the process's goroutines come back to what a freshly started agent on
// the empty node has beside the same runtime, and its OS threads stay within what the
// bounded update workers may add.
func TestCutSynchronizeLeavesNothing(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	const n, cuts = 24, 3
	const timeout = 300 * time.Millisecond
	s := newScaleNode(t, n)
	threads0 := osThreads(t)

	var gone atomic.Bool // every pod removed: the runtime lists nothing
	listing := func() ([]*api.PodSandbox, []*api.Container) {
		if gone.Load() {
			return nil, nil
		}
		return s.snapshot()
	}
	adaptation.SetPluginRequestTimeout(timeout)
	defer adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout)
	socket := filepath.Join(s.dir, "nri.sock")
	rt := startRuntimeWith(t, socket, listing)
	defer rt.Stop()

	p := NewPlugin(s.cfg, true, &specmodtest.Host{}, quietLogger())
	var late atomic.Int32
	p.syncAnswered = func() {
		if late.Add(1) <= cuts {
			time.Sleep(timeout + 200*time.Millisecond)
		}
	}
	stop := runPluginStoppable(t, p, socket)
	// A cut Synchronize still sleeping holds the next one behind it (one at a time): that
	// one may be cut too. The agent is through once a Synchronize is answered in time.
	syncs := 0
	for syncs < 10 {
		rt.waitSynced(t)
		if syncs++; int(rt.syncFailed.Load()) < syncs {
			break
		}
	}
	if got := int(rt.syncFailed.Load()); got < cuts || got >= syncs {
		t.Fatalf("the runtime cut %d of %d Synchronizes, want at least %d and then one answered", got, syncs, cuts)
	}
	waitLive(t, p, n)
	if st := p.Status().LiveSubPaths; st.Paths != n {
		t.Fatalf("live paths after %d cut Synchronizes: %d, want %d", cuts, st.Paths, n)
	}

	// Every pod goes.
	for i, ctr := range s.ctrs {
		if _, err := rt.StopContainer(context.Background(), &adaptation.StopContainerRequest{Pod: s.pods[i], Container: ctr}); err != nil {
			t.Fatal(err)
		}
		if err := rt.RemoveContainer(context.Background(), &adaptation.RemoveContainerRequest{Pod: s.pods[i], Container: ctr}); err != nil {
			t.Fatal(err)
		}
	}
	gone.Store(true)
	if st := p.Status().LiveSubPaths; st.Paths != 0 {
		t.Errorf("live paths after every pod went: %d, want 0", st.Paths)
	}
	after := settledGoroutines()
	threads := osThreads(t)
	stacks := goroutineStacks(t)
	stop()

	// The idle agent: a fresh one on the empty node, beside the same runtime.
	idle := NewPlugin(s.cfg, true, &specmodtest.Host{}, quietLogger())
	stopIdle := runPluginStoppable(t, idle, socket)
	rt.waitSynced(t)
	want := settledGoroutines()
	stopIdle()

	t.Logf("after %d cut Synchronizes and every pod gone: %d goroutines (idle agent: %d), %d OS threads (%d before the agent)",
		rt.syncFailed.Load(), after, want, threads, threads0)
	if after > want {
		t.Errorf("%d goroutines after every pod went, an idle agent has %d; the stacks:\n%s", after, want, stacks)
	}
	// The Go runtime keeps the threads it made; the agent may have made one per update
	// worker and per NRI request under way, not one per path or per Synchronize.
	if most := threads0 + updateWorkersBound + cuts + 4; threads > most {
		t.Errorf("%d OS threads after every pod went, %d before the agent: more than %d", threads, threads0, most)
	}
}

// updateWorkersBound is liveupdate's bound on update workers (updateWorkers), each of which
// may hold an OS thread in a mount call.
const updateWorkersBound = 8

// settledGoroutines is the process's goroutine count once it stopped changing (goroutines
// that end after a request was answered end within a few polls).
func settledGoroutines() int {
	last, same := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(5 * time.Second); same < 10 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		now := runtime.NumGoroutine()
		if now == last {
			same++
		} else {
			last, same = now, 0
		}
	}
	return last
}

func goroutineStacks(t testing.TB) string {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
