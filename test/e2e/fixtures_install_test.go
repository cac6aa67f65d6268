//go:build e2e

package e2e

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// configureArgs are the flags that point `mountkeeper runtime configure|unconfigure` at the
// node's runtime instead of /etc: its main config (and CRI-O's drop-in directory), and
// mountkeeper's drop-in and install dir in the test's directory.
func (n *node) configureArgs() []string {
	n.t.Helper()
	args := []string{"--runtime", n.rt.Name(), "--install-dir", filepath.Join(n.dir, "install")}
	switch rt := n.rt.(type) {
	case *harness.Containerd:
		args = append(args, "--config-file", rt.ConfigPath(), "--drop-in", filepath.Join(n.dir, "containerd-conf.d", "99-mountkeeper.toml"))
	case *harness.CRIO:
		args = append(args, "--config-file", rt.ConfigPath(), "--config-dir", rt.ConfigDir())
	}
	return args
}

// runtimeCommand runs `mountkeeper runtime <verb>` on the node and returns its output.
func (n *node) runtimeCommand(verb string, extra ...string) string {
	n.t.Helper()
	args := append([]string{"runtime", verb}, n.configureArgs()...)
	if verb == "configure" {
		wrapper, err := harness.BuildRuntimeWrapper(n.dir)
		if err != nil {
			n.t.Fatal(err)
		}
		args = append(args, "--config", n.config, "--runtime-binary", wrapper)
	}
	out, err := exec.Command(n.bin, append(args, extra...)...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("mountkeeper %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runtimeFiles is every file configure may touch: the runtime's config file(s) and directory,
// the test's drop-in and install directories (testenv.FileTree).
func (n *node) runtimeFiles() map[string]string {
	n.t.Helper()
	roots := []string{filepath.Join(n.dir, "install"), filepath.Join(n.dir, "containerd-conf.d")}
	switch rt := n.rt.(type) {
	case *harness.Containerd:
		roots = append(roots, rt.ConfigPath())
	case *harness.CRIO:
		roots = append(roots, rt.ConfigPath(), rt.ConfigDir())
	}
	return testenv.FileTree(roots...)
}

// byDestination sorts a spec's mounts by destination, then type and source.
func byDestination(mounts []any) {
	key := func(m any) string {
		mm := m.(map[string]any)
		return fmt.Sprint(mm["destination"], "\x00", mm["type"], "\x00", mm["source"])
	}
	sort.SliceStable(mounts, func(i, j int) bool { return key(mounts[i]) < key(mounts[j]) })
}

// nodeCleanup runs `mountkeeper node cleanup` on the node's config.
func (n *node) nodeCleanup() (string, error) {
	out, err := exec.Command(n.bin, "node", "cleanup", "--config", n.config).CombinedOutput()
	n.t.Logf("mountkeeper node cleanup: %v\n%s", err, out)
	return string(out), err
}

// uninstallSnapshot is what an install of mountkeeper changes on the node and an uninstall
// must return: every file configure may touch (runtimeFiles: the runtime's config, the drop-in
// dir, the install dir; byte for byte with mode and owner), whether the state dir exists, the
// mounts below the test's directories, the network mounts' scopes, and the processes that
// name the test's directories.
type uninstallSnapshot struct {
	Files    map[string]string
	StateDir bool
	Mounts   []string // mount ID, root, mount point, type, source
	Cgroups  []string // below the cgroup2 root
	Procs    []string // pid and command line
}

// uninstallSnapshot takes the node's snapshot; keys are the network mounts' keys, whose
// scopes it looks for, and dirs more directories than the node's own to look below.
func (n *node) uninstallSnapshot(keys []string, dirs ...string) uninstallSnapshot {
	n.t.Helper()
	dirs = append([]string{n.dir}, dirs...)
	below := func(s string) bool {
		return slices.ContainsFunc(dirs, func(d string) bool { return s == d || strings.HasPrefix(s, d+"/") })
	}
	mentions := func(s string) bool {
		return slices.ContainsFunc(dirs, func(d string) bool { return strings.Contains(s, d) })
	}
	var s uninstallSnapshot
	s.Files = n.runtimeFiles()
	_, err := os.Stat(filepath.Join(n.src(), "state"))
	s.StateDir = err == nil
	ms, err := testsupport.Mounts(0, func(m *mountinfo.Info) (skip, stop bool) {
		return !below(m.Mountpoint) && (m.FSType != "fuse.sshfs" || !mentions(mountLine(m))), false
	})
	if err != nil {
		n.t.Fatal(err)
	}
	for _, m := range ms {
		s.Mounts = append(s.Mounts, fmt.Sprintf("%d %s %s %s %s", m.ID, m.Root, m.Mountpoint, m.FSType, m.Source))
	}
	s.Cgroups = scopeCgroups(n.t, keys)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if cmd := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "); mentions(cmd) {
			s.Procs = append(s.Procs, e.Name()+" "+cmd)
		}
	}
	return s
}

// diff says how b differs from a.
func (a uninstallSnapshot) diff(b uninstallSnapshot) string {
	var out []string
	for p, v := range b.Files {
		if w, ok := a.Files[p]; !ok {
			out = append(out, fmt.Sprintf("file added: %s %s", p, shownContent(v)))
		} else if w != v {
			out = append(out, fmt.Sprintf("file changed: %s %s, was %s", p, shownContent(v), shownContent(w)))
		}
	}
	for p := range a.Files {
		if _, ok := b.Files[p]; !ok {
			out = append(out, "file removed: "+p)
		}
	}
	if a.StateDir != b.StateDir {
		out = append(out, fmt.Sprintf("state dir exists: %v, was %v", b.StateDir, a.StateDir))
	}
	for _, l := range [][3]any{{"mount", a.Mounts, b.Mounts}, {"cgroup", a.Cgroups, b.Cgroups}, {"process", a.Procs, b.Procs}} {
		was, now := l[1].([]string), l[2].([]string)
		for _, x := range now {
			if !slices.Contains(was, x) {
				out = append(out, fmt.Sprintf("%s added: %s", l[0], x))
			}
		}
		for _, x := range was {
			if !slices.Contains(now, x) {
				out = append(out, fmt.Sprintf("%s gone: %s", l[0], x))
			}
		}
	}
	slices.Sort(out)
	return "\n  " + strings.Join(out, "\n  ")
}

// shownContent is a snapshot's file as a diff shows it: quoted, or for a long one (a binary
// configure installs) its length and digest instead of megabytes of log.
func shownContent(v string) string {
	if len(v) <= 4096 {
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("(%d bytes, sha256 %x)", len(v), sha256.Sum256([]byte(v)))
}

// waitSnapshot takes snapshots until one equals want or within has passed, and returns the
// last: what an uninstall leaves may take a moment to go (a FUSE daemon after its unmount, a
// pod's processes).
func waitSnapshot(snap func() uninstallSnapshot, want uninstallSnapshot, within time.Duration) uninstallSnapshot {
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		if got := snap(); reflect.DeepEqual(got, want) || time.Now().After(deadline) {
			return got
		}
	}
}

const guardConfig = `
runtimeClasses:
  mk-guard:
    mounts:
      - {source: SRC/guarded, destination: /guarded, readOnly: true}
`

// newGuardedNode is a node with the guard's config (class mk-guard) and its source directory.
func newGuardedNode(t *testing.T, kind harness.RuntimeKind) *node {
	n := newNode(t, kind, nil, guardConfig)
	if err := os.MkdirAll(filepath.Join(n.src(), "guarded"), 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}
