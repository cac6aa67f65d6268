package liveupdate

import (
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestScanWaitsOffLock: a scan of /proc that waits (findHeld blocked, as a read in /proc
// waiting on the kernel would) holds up no update, no Stop and no save: the updates of both
// paths are applied and a Stop of another container (which saves, taking every path's lock)
// returns while the scan waits; once it goes on, the replaced versions are freed.
func TestScanWaitsOffLock(t *testing.T) {
	if !privatens.Run(t) || !liveHere(t) {
		return
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	findHeld = func(dev uint64, want map[uint64]bool, dirs bool) heldSet {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return heldInodes(dev, want, dirs)
	}
	defer func() { findHeld = heldInodes }()
	s := newLiveSetup(t, bigBudget, payload(0))
	s.f.Arm("ctr1", 0)
	s.k.WriteAtomic(s.vol, payload(1))
	for _, u := range s.wait(t, 2) { // a hang guard of 20 s: the worker retired under the path's lock
		if u.Result != UpdateApplied {
			t.Fatalf("update: %+v", u)
		}
	}
	select {
	case <-entered:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("no scan after the update")
	}
	stopped := make(chan struct{})
	go func() { s.f.Stop("another"); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("Stop of another container waits for the scan")
	}
	if st := s.f.Status(); st.RetiredCopies != 2 {
		t.Errorf("while the scan waits: %+v, want 2 retired copies", st)
	}
	close(release)
	waitRetired(t, s.f, 0)
	s.f.Stop("ctr1")
}
