package nri

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestSynchronizeLeavesResumeForLater restarts the agent on a node of pods with live subPaths
// while its reconciler is held before it resumes anything: the runtime's Synchronize is
// answered all the same. In that window a new pod's container is created (it gets its live
// copy, which is neither swept nor stopped when the reconciler goes on), and a listed one is
// removed (it is not resumed and its copies are gone). Then Synchronizes cut by the runtime
// and repeated come in while the reconciler is held: one reconciler runs at a time and it
// follows each path once. The reconciler let go, every path left follows its volume; every
// container removed, no worker of the Follower is left.
func TestSynchronizeLeavesResumeForLater(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	const n = 4
	s := newScaleNode(t, n)
	baseline := goroutinesIn(t, "liveupdate.(*Follower).work")

	p := NewPlugin(s.cfg, true, &specmodtest.Host{}, quietLogger())
	entered, release := make(chan struct{}, 16), make(chan struct{})
	var active, most atomic.Int32
	p.reconcile.hold = func() {
		entered <- struct{}{}
		select { // bounded: a plugin that held the runtime here must fail the test, not hang it
		case <-release:
		case <-time.After(20 * time.Second):
		}
	}
	run := p.reconcile.run
	p.reconcile.run = func(j *syncJob) {
		now := active.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		defer active.Add(-1)
		run(j)
	}
	socket := s.dir + "/nri.sock"
	rt := startRuntimeWith(t, socket, s.snapshot)
	defer rt.Stop()
	stop := runPluginStoppable(t, p, socket)
	rt.waitSynced(t) // answered while the reconciler is held
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the reconciler did not start within 10s")
	}
	if st := p.Status().LiveSubPaths; st == nil || st.Paths != 0 {
		t.Fatalf("live paths before the reconciler ran: %+v, want none yet", st)
	}

	// In the window: a new container, and a listed one removed.
	pod, ctr, vol := s.newPod(t, "new")
	newFile := create(t, rt, pod, ctr)
	if err := rt.RemoveContainer(context.Background(), &adaptation.RemoveContainerRequest{Pod: s.pods[0], Container: s.ctrs[0]}); err != nil {
		t.Fatal(err)
	}
	// A Synchronize cut by the runtime goes on in the plugin beside the next ones.
	listed := func() ([]*api.PodSandbox, []*api.Container) {
		pods, ctrs := s.snapshot()
		return append(pods[1:], pod), append(ctrs[1:], cloneContainer(ctr))
	}
	var syncs sync.WaitGroup
	for range 3 {
		syncs.Add(1)
		go func() {
			defer syncs.Done()
			pods, ctrs := listed()
			if _, err := p.Synchronize(context.Background(), pods, ctrs); err != nil {
				t.Errorf("Synchronize: %v", err)
			}
		}()
	}
	syncs.Wait()
	close(release)
	waitLive(t, p, n)
	p.reconcile.stop() // waits for what is left
	if m := most.Load(); m != 1 {
		t.Errorf("%d reconcilers ran at once, want 1", m)
	}
	if st := p.Status().LiveSubPaths; st == nil || st.Paths != n {
		t.Errorf("live paths: %+v, want %d: the %d listed and left, and the new one", st, n, n-1)
	}
	if _, err := os.Stat(s.files[0]); !os.IsNotExist(err) {
		t.Errorf("the copy of the container removed in the window is left: %v", err)
	}

	// Every path left follows its volume, the new one too.
	files := append(append([]string(nil), s.files[1:]...), newFile)
	for _, v := range append(append([]string(nil), s.vols[1:]...), vol) {
		old, err := harness.WriteAtomic(v, map[string]string{"app.conf": "v2"})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(old); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	for _, f := range files {
		for deadline := time.Now().Add(20 * time.Second); read(f) != "v2" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		}
		if got := read(f); got != "v2" {
			t.Errorf("%s reads %q after the update, want v2", f, got)
		}
	}

	// Every container removed: nothing of the Follower's runs.
	for i := 1; i < n; i++ {
		if err := rt.RemoveContainer(context.Background(), &adaptation.RemoveContainerRequest{Pod: s.pods[i], Container: s.ctrs[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.RemoveContainer(context.Background(), &adaptation.RemoveContainerRequest{Pod: pod, Container: ctr}); err != nil {
		t.Fatal(err)
	}
	if st := p.Status().LiveSubPaths; st == nil || st.Paths != 0 {
		t.Errorf("live paths after every container went: %+v, want none", st)
	}
	if got := waitGoroutinesIn(t, "liveupdate.(*Follower).work", baseline); got > baseline {
		t.Errorf("%d Follower workers after every container went, %d before the agent started", got, baseline)
	}
	stop()
}

// goroutinesIn counts the goroutines with fn on their stack.
func goroutinesIn(t testing.TB, fn string) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	// debug=1: one block per distinct stack, "<count> @ <pcs>" then "#\t<pc>\t<func>+..." lines.
	n, count := 0, 0
	sc := bufio.NewScanner(&b)
	for sc.Scan() {
		line := sc.Text()
		if c, _, ok := strings.Cut(line, " @ "); ok {
			count, _ = strconv.Atoi(c)
			continue
		}
		if strings.HasPrefix(line, "#") && strings.Contains(line, fn+"+") {
			n += count
			count = 0 // once per block
		}
	}
	return n
}

// waitGoroutinesIn waits, bounded, for the goroutines in fn to fall to want.
func waitGoroutinesIn(t testing.TB, fn string, want int) int {
	got := goroutinesIn(t, fn)
	for deadline := time.Now().Add(10 * time.Second); got > want && time.Now().Before(deadline); got = goroutinesIn(t, fn) {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
	return got
}

// TestContainerDuringResume holds the reconciler in the middle of resuming a restarted
// agent's live paths (two of six followed again) and, in that window, creates a new pod's
// container and stops a listed one not resumed yet: the new one gets its live copy and follows
// its volume; the stopped one is not resumed when the reconciler goes on.
func TestContainerDuringResume(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	const n = 6
	s := newScaleNode(t, n)
	p := NewPlugin(s.cfg, true, &specmodtest.Host{}, quietLogger())
	mid, release := make(chan struct{}), make(chan struct{})
	var steps atomic.Int32
	// Step 1 is before the resume; then one before each path: step 4 comes after two.
	p.reconcile.step = func() {
		if steps.Add(1) != 4 {
			return
		}
		close(mid)
		select { // bounded: a reconciler held here must fail the test, not hang it
		case <-release:
		case <-time.After(20 * time.Second):
		}
	}
	socket := s.dir + "/nri.sock"
	rt := startRuntimeWith(t, socket, s.snapshot)
	defer rt.Stop()
	stop := runPluginStoppable(t, p, socket)
	rt.waitSynced(t)
	select {
	case <-mid:
	case <-time.After(20 * time.Second):
		t.Fatal("the reconciler did not reach its fourth step within 20s")
	}
	if st := p.Status().LiveSubPaths; st == nil || st.Paths != 2 {
		t.Fatalf("live paths in the middle of the resume: %+v, want 2", st)
	}
	// In the window: the last listed container stops (its copy stays mounted until it is
	// removed), a new one comes.
	last := n - 1
	if _, err := rt.StopContainer(context.Background(), &adaptation.StopContainerRequest{Pod: s.pods[last], Container: s.ctrs[last]}); err != nil {
		t.Fatal(err)
	}
	pod, ctr, vol := s.newPod(t, "new")
	newFile := create(t, rt, pod, ctr) // fails the test unless bound from a live copy
	close(release)
	waitLive(t, p, n) // the n-1 listed and left, and the new one
	p.reconcile.stop()
	if st := p.Status().LiveSubPaths; st == nil || st.Paths != n {
		t.Errorf("live paths after the resume: %+v, want %d: the container stopped during it is not resumed", st, n)
	}
	if err := rt.RemoveContainer(context.Background(), &adaptation.RemoveContainerRequest{Pod: s.pods[last], Container: s.ctrs[last]}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.files[last]); !os.IsNotExist(err) {
		t.Errorf("the copy of the container stopped during the resume is left after its removal: %v", err)
	}
	old, err := harness.WriteAtomic(vol, map[string]string{"app.conf": "v2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(old); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
	for deadline := time.Now().Add(20 * time.Second); read(newFile) != "v2" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	if got := read(newFile); got != "v2" {
		t.Errorf("the container created during the resume reads %q after its volume's update, want v2", got)
	}
	stop()
}
