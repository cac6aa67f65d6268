package liveupdate

import (
	"os"
	"sync"
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

// TestScanFreesOnlyWhatItLookedFor: a version retired while a scan reads /proc (there slowly:
// findHeld blocked) is not freed by that scan, which never looked for its inodes, however
// long the scan took: here it is held open, so it must stay retired and counted. Under
// QEMU's TCG, or a loaded host, one scan of /proc outlasts retireGrace, and the version
// held open was freed (RemoveAll) and uncharged by the scan that began before it was retired.
func TestScanFreesOnlyWhatItLookedFor(t *testing.T) {
	if !privatens.Run(t) || !liveHere(t) {
		return
	}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	findHeld = func(dev uint64, want map[uint64]bool, dirs bool) heldSet {
		once.Do(func() { entered <- struct{}{}; <-release }) // the first scan waits
		return heldInodes(dev, want, dirs)
	}
	defer func() { findHeld = heldInodes }()
	s := newLiveSetup(t, bigBudget, payload(0))
	s.f.Arm("ctr1", 0)
	s.k.WriteAtomic(s.vol, payload(1))
	s.wait(t, 2)
	select {
	case <-entered: // that scan looks for the two bases only
	case <-time.After(time.Minute): // a hang guard
		close(release)
		t.Fatal("no scan after the update")
	}
	held, err := os.Open(s.fileCopy) // version 1's file
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	defer held.Close()
	s.k.WriteAtomic(s.vol, payload(2)) // retires version 1 while the scan waits
	s.wait(t, 2)
	time.Sleep(retireGrace + 50*time.Millisecond) // the scan outlasts the grace of version 1
	close(release)
	s.f.scan() // after the waiting one (one scan at a time)
	s.f.mu.Lock()
	var paths []string
	for _, r := range s.f.retired {
		paths = append(paths, r.path)
	}
	s.f.mu.Unlock()
	if len(paths) != 1 || paths[0] != s.fileCopy+".v1" {
		t.Errorf("with version 1 of %s held open, retired %v, want it alone", s.fileCopy, paths)
	}
	if _, err := os.Stat(s.fileCopy + ".v1"); err != nil {
		t.Errorf("version 1, held open, was removed: %v", err)
	}
	held.Close()
	waitRetired(t, s.f, 0)
	s.f.Stop("ctr1")
}
