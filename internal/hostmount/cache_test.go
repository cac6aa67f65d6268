package hostmount

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/specmod"
	"github.com/mountkeeper/mountkeeper/test/privatens"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// countingInspector is System, counting the questions it is asked.
type countingInspector struct {
	System
	n atomic.Int64
}

func (c *countingInspector) Stat(p string) (fs.FileInfo, error) { c.n.Add(1); return c.System.Stat(p) }
func (c *countingInspector) MountPoints(p []string) ([]MountPoint, error) {
	c.n.Add(1)
	return c.System.MountPoints(p)
}

// sharedTmpfs mounts a shared tmpfs on a new directory, makes each of dirs (relative paths)
// in it, and returns the directory.
func sharedTmpfs(t *testing.T, dirs ...string) string {
	t.Helper()
	dir := t.TempDir()
	mount(t, "-t", "tmpfs", "mk-cache", dir)
	testsupport.Run(t, "mount", "--make-shared", dir)
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// countingChecker is a caching Checker of the live host, which counts its questions.
func countingChecker(t *testing.T) (*Checker, *countingInspector) {
	t.Helper()
	in := &countingInspector{}
	c, err := NewChecker(in).WithCache()
	if err != nil {
		t.Fatal(err)
	}
	return c, in
}

// TestCacheSeesEveryChange: a cached check asks the host nothing, and the next check after any
// change that matters (the source removed, a component turned into a symlink, the mount made
// private) sees it.
func TestCacheSeesEveryChange(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	dir := sharedTmpfs(t, "srv/a")
	src := filepath.Join(dir, "srv", "a")
	c, in := countingChecker(t)
	mounts := []specmod.Mount{{Source: src, Destination: "/a", Propagation: specmod.Slave}}
	check := func(step string, want string) {
		t.Helper()
		err := c.CheckSources(mounts)
		switch {
		case want == "" && err != nil:
			t.Fatalf("%s: %v", step, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Fatalf("%s: %v, want an error containing %q", step, err, want)
		}
	}
	check("first check", "")
	before := in.n.Load()
	check("cached check", "")
	// A slave source's propagation is read again on each hit by the mount's unique ID
	// (statmount, Linux >= 6.8); without one its check is never cached.
	id, err := mounttable.MountID(src)
	if err != nil {
		t.Fatal(err)
	}
	switch asked := in.n.Load() - before; {
	case id >= mounttable.UniqueIDOffset && asked != 0:
		t.Errorf("a cached check asked the host %d questions", asked)
	case id < mounttable.UniqueIDOffset && asked == 0:
		t.Errorf("without unique mount IDs (mount ID %d) a slave source's second check asked the host nothing: its propagation was not read again", id)
	}

	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	check("after the source was removed", "does not exist")

	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	check("source back", "")
	check("cached again", "")
	old := filepath.Join(dir, "srv.old")
	if err := os.Rename(filepath.Join(dir, "srv"), old); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(old, filepath.Join(dir, "srv")); err != nil {
		t.Fatal(err)
	}
	check("after a component became a symlink", "symlink")

	if err := os.Remove(filepath.Join(dir, "srv")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(old, filepath.Join(dir, "srv")); err != nil {
		t.Fatal(err)
	}
	check("real directory back", "")
	check("cached again", "")

	// A component removed and made again is a new directory: it must be watched anew.
	if err := os.RemoveAll(filepath.Join(dir, "srv")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	check("after srv was made again", "")
	check("cached again", "")
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(old, src); err != nil {
		t.Fatal(err)
	}
	check("after the source in the new srv became a symlink", "symlink")
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	check("source back", "")
	testsupport.Run(t, "mount", "--make-private", dir)
	check("after the mount was made private", "is private")
}

// TestCacheSharesOneMountsAnswer: sources on one host mount are held to the one answer their
// cached check gets for that mount (propagationNow asks statmount once per mount and check;
// the count is not observed here), each to its own propagation: once the mount is a slave, the
// next check passes the rslave source and refuses the rshared one.
func TestCacheSharesOneMountsAnswer(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	dir, peer := sharedTmpfs(t, "slave", "shared"), t.TempDir()
	mount(t, "--bind", dir, peer) // a peer, to be dir's master below
	c, err := NewChecker(System{}).WithCache()
	if err != nil {
		t.Fatal(err)
	}
	mounts := []specmod.Mount{
		{Source: filepath.Join(dir, "slave"), Destination: "/slave", Propagation: specmod.Slave},
		{Source: filepath.Join(dir, "shared"), Destination: "/shared", Propagation: specmod.Shared},
	}
	for _, step := range []string{"first check", "cached check"} {
		if err := c.CheckSources(mounts); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	// dir made a slave of its peer: no longer shared. No mount table change that poll sees.
	testsupport.Run(t, "mount", "--make-slave", dir)
	err = c.CheckSources(mounts)
	if err == nil || !strings.Contains(err.Error(), "/shared") || !strings.Contains(err.Error(), "needs it shared") || strings.Contains(err.Error(), "/slave (") {
		t.Fatalf("after the mount became a slave: %v, want only the rshared source refused", err)
	}
}

// TestCacheWithoutUniqueIDsWatchesNoPropagatingSource: on a kernel without unique mount IDs
// (Linux < 6.8, faked here where the kernel has them) a check of an rslave source watches
// nothing, its answer never being cached, and asks the host every time, so a source made
// private is refused at the next check; a source of propagation None is watched and cached
// there as anywhere.
func TestCacheWithoutUniqueIDsWatchesNoPropagatingSource(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	dir := sharedTmpfs(t, "slave/a", "private/a")
	slave, private := filepath.Join(dir, "slave", "a"), filepath.Join(dir, "private", "a")
	c, in := countingChecker(t)
	c.cache.uniqueIDs = false
	watched := func() int {
		c.cache.ch.mu.Lock()
		defer c.cache.ch.mu.Unlock()
		return len(c.cache.ch.names)
	}
	twice := func(m specmod.Mount) (asked int64) {
		t.Helper()
		for i := range 2 {
			if i == 1 {
				asked = in.n.Load()
			}
			if err := c.CheckSources([]specmod.Mount{m}); err != nil {
				t.Fatal(err)
			}
		}
		return in.n.Load() - asked
	}
	if asked := twice(specmod.Mount{Source: slave, Destination: "/a", Propagation: specmod.Slave}); asked == 0 {
		t.Error("an rslave source's second check asked the host nothing: its propagation was not read again")
	}
	if n := watched(); n != 0 {
		t.Errorf("the checks of an rslave source, which are never cached, watched %d directories", n)
	}
	testsupport.Run(t, "mount", "--make-private", dir)
	if err := c.CheckSources([]specmod.Mount{{Source: slave, Destination: "/a", Propagation: specmod.Slave}}); err == nil || !strings.Contains(err.Error(), "is private") {
		t.Errorf("after the mount was made private: %v, want it refused", err)
	}
	if asked := twice(specmod.Mount{Source: private, Destination: "/a", Propagation: specmod.Private}); asked != 0 {
		t.Errorf("a cached check of a source of propagation None asked the host %d questions", asked)
	}
	if watched() == 0 {
		t.Error("the check of a source of propagation None watched nothing")
	}
}
