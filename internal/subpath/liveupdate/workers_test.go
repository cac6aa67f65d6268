package liveupdate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/subpathtest"
	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestFollowerWorkersEnd: nothing of the Follower's outlives what it serves. With N volumes
// followed and idle, no worker goroutine runs (one is started for an update and ends after
// it); a successor agent resumed by several Synchronizes at once (one cut by the runtime goes
// on beside the next) follows each path once; once every container is stopped, the goroutine
// count is back to what it was before the first Follower.
func TestFollowerWorkersEnd(t *testing.T) {
	if !privatens.Run(t) || !liveHere(t) {
		return
	}
	const n = 12
	k := subpathtest.NewKubelet(t)
	c := newCopies(t, k, bigBudget)
	before := runtime.NumGoroutine()
	state := filepath.Join(t.TempDir(), "live.json")
	f := NewFollower(c, state, nil)
	var vols, ids []string
	for i := range n {
		vol := k.Volume(subpathtest.ConfigMap, fmt.Sprintf("cfg%d", i), false)
		k.WriteAtomic(vol, map[string]subpathtest.Entry{"app.conf": subpathtest.File("v0")})
		target := subpathtest.Bind(k, subpath.ParseTarget, vol, fmt.Sprintf("cfg%d", i), "app", 0, "app.conf")
		id := fmt.Sprintf("ctr%d", i)
		cps, _, fbs := c.CopySources(context.Background(), id, []string{target.Path})
		if len(cps) != 1 || len(fbs) != 0 {
			t.Fatalf("copies %v, fallbacks %v", cps, fbs)
		}
		cps[0].Live = true
		if failed := f.Track(id, cps); len(failed) != 0 {
			t.Fatalf("Track: %v", failed)
		}
		f.Arm(id, 0)
		vols, ids = append(vols, vol), append(ids, id)
	}
	t.Cleanup(func() {
		for _, id := range ids {
			subpathtest.Must(t, c.Remove(id))
		}
	})
	if got := waitWorkers(0); got != 0 {
		t.Errorf("%d worker goroutines for %d idle volumes, want none", got, n)
	}
	f.Close() // the agent goes; its successor is resumed by 3 Synchronizes at once
	f = NewFollower(c, state, nil)
	running := map[string]bool{}
	for _, id := range ids {
		running[id] = true
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.Resume(running); err != nil {
				t.Errorf("Resume: %v", err)
			}
		}()
	}
	wg.Wait()
	if st := f.Status(); st.Paths != n {
		t.Errorf("after 3 Resumes at once: %d live paths, want %d", st.Paths, n)
	}
	for _, vol := range vols {
		old := k.WriteAtomic(vol, map[string]subpathtest.Entry{"app.conf": subpathtest.File("v1")})
		subpathtest.Must(t, os.RemoveAll(old))
	}
	for deadline := time.Now().Add(20 * time.Second); f.Status().Updates[UpdateApplied] < n && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	if st := f.Status(); st.Updates[UpdateApplied] != n {
		t.Errorf("updates: %+v, want %d applied", st.Updates, n)
	}
	if got := waitWorkers(0); got != 0 {
		t.Errorf("%d worker goroutines after the updates were applied, want none", got)
	}
	for _, id := range ids {
		f.Stop(id)
	}
	if got := waitGoroutines(before); got > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after every container stopped, %d before the first Follower:\n%s", got, before, buf[:runtime.Stack(buf, true)])
	}
	f.Close()
}

// waitWorkers waits, bounded, for the Follower's worker goroutines to fall to want.
func waitWorkers(want int) int {
	got := workers()
	for deadline := time.Now().Add(10 * time.Second); got > want && time.Now().Before(deadline); got = workers() {
		time.Sleep(10 * time.Millisecond)
	}
	return got
}

// workers counts the goroutines in Follower.work.
func workers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return countIn(string(buf), "liveupdate.(*Follower).work(")
}

// countIn counts the goroutines of a runtime.Stack dump whose stack holds fn.
func countIn(dump, fn string) int {
	n := 0
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}
