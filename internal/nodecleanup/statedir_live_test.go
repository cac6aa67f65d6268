package nodecleanup

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/guard"
	"github.com/mountkeeper/mountkeeper/test/privatens"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestCleanupKeepsForeignFiles: a state directory with everything an agent writes there (the
// guard key, the guard's refusals, the live subPath state, the network mounts' state,
// secrets, locks and mount points, the copy tmpfs' mount point, their temporary files) and,
// beside them, what is not mountkeeper's: a database in a directory of its own, a file among
// the state files, a symlink where the key locks' directory should be, leading out of the
// state directory to a file named like a key's lock. The cleanup removes what mountkeeper made, names
// each foreign entry, keeps it (and the directories that hold it), and does not follow the
// symlink.
func TestCleanupKeepsForeignFiles(t *testing.T) {
	testenv.Require(t, "root")
	if !privatens.Run(t) {
		return
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	key := "0123456789abcdef"
	ours := []string{
		guard.KeyFile, guard.KeyFile + ".123456", guard.KeyFile + ".lock", guard.RefusalsFile, guard.RefusalsFile + ".lock", guard.RefusalsFile + ".98765",
		"lock", "subpath-live.json", "subpath-live.json.tmp",
		"state/" + key + ".json", "state/." + key + ".4242.tmp",
		"secrets/" + key, "secrets/.secret.777.tmp",
	}
	ourDirs := []string{"subpath", "mounts/" + key, "staging/" + key + ".3", "staging/" + key + ".hook1234"}
	foreign := []string{"db/important.sqlite", "state/important.json", "notes.txt", "mounts/README"}
	named := []string{"db", "state/important.json", "notes.txt", "mounts/README", "locks"} // what the output names
	outside := filepath.Join(dir, "elsewhere")
	for _, d := range append(ourDirs, "state", "secrets", "db") {
		mkdirs(t, filepath.Join(state, d))
	}
	mkdirs(t, outside)
	for _, f := range append(ours, foreign...) {
		writeFile(t, filepath.Join(state, f), "x")
	}
	// A symlink where locks/ would be leads outside, to a file named like a key's lock.
	writeFile(t, filepath.Join(outside, key+".lock"), "not mountkeeper's")
	if err := os.Symlink(outside, filepath.Join(state, "locks")); err != nil {
		t.Fatal(err)
	}
	// mounts/ and staging/ bound onto themselves, as the agent makes them.
	for _, d := range []string{"mounts", "staging"} {
		p := filepath.Join(state, d)
		mount(t, p, p, "", unix.MS_BIND)
	}
	t.Cleanup(func() { detachAll(state) })

	var b bytes.Buffer
	err := Run(context.Background(), testOptions(t, state, &b))
	t.Logf("cleanup:\n%s-> %v", b.String(), err)
	if err != nil {
		t.Fatalf("cleanup: %v, want the foreign files kept and named, and no error", err)
	}
	for _, f := range append(foreign, "locks") {
		if !exists(filepath.Join(state, f)) {
			t.Errorf("%s, not mountkeeper's, was removed", f)
		}
	}
	for _, f := range named {
		if !strings.Contains(b.String(), "keep "+filepath.Join(state, f)+": not mountkeeper's") {
			t.Errorf("the output does not name %s, kept", f)
		}
	}
	if !strings.Contains(b.String(), "left the state directory "+state+" in place") {
		t.Error("the output does not say that the state directory stays")
	}
	if got, err := os.ReadFile(filepath.Join(outside, key+".lock")); err != nil || string(got) != "not mountkeeper's" {
		t.Errorf("the file the symlink leads to: %q, %v", got, err)
	}
	for _, f := range append(ours, ourDirs...) {
		if exists(filepath.Join(state, f)) {
			t.Errorf("%s, mountkeeper's, is left", f)
		}
	}
	if infos, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(state)); len(infos) != 0 {
		t.Errorf("mounts left below the state directory: %d, the first at %s", len(infos), infos[0].Mountpoint)
	}
}
