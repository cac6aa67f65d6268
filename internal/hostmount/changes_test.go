package hostmount

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWatchSharesAncestorsAndForgetsRemovedDirectories: the sources of one check share the
// watches of their common ancestors, each ancestor remembering every source's entry in it; a
// watched directory removed takes its entries along once its watch is dropped.
func TestWatchSharesAncestorsAndForgetsRemovedDirectories(t *testing.T) {
	c, err := newChanges()
	if err != nil {
		t.Skipf("no inotify or mountinfo: %v", err)
	}
	defer unix.Close(c.inotify)
	defer unix.Close(c.mountinfo)
	dir := t.TempDir()
	a, x, y := filepath.Join(dir, "a"), filepath.Join(dir, "a", "x"), filepath.Join(dir, "a", "y")
	for _, d := range []string{x, y} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	watched := map[string]int32{}
	for _, src := range []string{x, y} {
		ok, err := c.watch(src, watched)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Skipf("%s is on a filesystem inotify cannot follow", dir)
		}
	}
	wdA := watched[a]
	if names := c.names[wdA]; !names["x"] || !names["y"] || len(names) != 2 {
		t.Errorf("entries that matter in %s: %v, want x and y", a, names)
	}
	c.changed()
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	if !c.changed() {
		t.Error("the removal of a source's parent went unseen")
	}
	if _, ok := c.names[wdA]; ok {
		t.Errorf("%s is gone, its watch dropped, but its entries are still kept", a)
	}
	if !c.names[watched[dir]]["a"] {
		t.Errorf("the entry a in %s, still watched, was forgotten", dir)
	}
}
