//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// findPID returns the PID of the one process whose command line contains all words.
func findPID(t *testing.T, words ...string) int {
	t.Helper()
	var found []int
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		cmd, err := os.ReadFile(p)
		if err != nil || !containsAllWords(string(cmd), words) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		found = append(found, pid)
	}
	if len(found) != 1 {
		t.Fatalf("processes with %q in their command line: %v, want one", words, found)
	}
	return found[0]
}

func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// nsOf returns the namespace of kind ns of a process ("mnt:[4026531841]").
func nsOf(t *testing.T, pid int, ns string) string {
	t.Helper()
	l, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", ns))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// processesIn returns the processes in PID namespace pidNS or mount namespace mntNS, and
// those holding a file descriptor on either namespace.
func processesIn(t *testing.T, pidNS, mntNS string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p := filepath.Join("/proc", e.Name())
		cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		stat, _ := os.ReadFile(filepath.Join(p, "stat"))
		desc := strconv.Itoa(pid) + " (" + strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")) + ") " + string(stat)
		pn, _ := os.Readlink(filepath.Join(p, "ns", "pid"))
		mn, _ := os.Readlink(filepath.Join(p, "ns", "mnt"))
		if pn == pidNS || mn == mntNS {
			out = append(out, desc)
			continue
		}
		fds, _ := os.ReadDir(filepath.Join(p, "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join(p, "fd", fd.Name())); l == pidNS || l == mntNS {
				out = append(out, desc+" holds "+l)
				break
			}
		}
	}
	return out
}

// cgroupOf returns the cgroup2 path of a process.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	cg, _ := testsupport.ParseCgroupV2(string(data))
	return cg
}

// cgroupV1Paths lists a process's cgroup v1 memberships (hierarchy:path).
func cgroupV1Paths(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var v1 []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(line, "0::") {
			v1 = append(v1, line)
		}
	}
	return strings.Join(v1, " ")
}

// daemonOf is the pid of the FUSE daemon serving the mount at point: the process whose
// command line names it.
func daemonOf(t *testing.T, point string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		for _, arg := range strings.Split(string(cmdline), "\x00") {
			if arg == point {
				return pid
			}
		}
	}
	t.Fatalf("no process serves the mount at %s", point)
	return 0
}

// daemonPids are the processes of the mount's cgroup scope that daemon accepts by name.
func daemonPids(t *testing.T, scope string, daemon func(comm string) bool) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(scope, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		comm, _ := os.ReadFile("/proc/" + f + "/comm")
		if daemon(strings.TrimSpace(string(comm))) {
			pid, _ := strconv.Atoi(f)
			pids = append(pids, pid)
		}
	}
	return pids
}

// mountScopeExists says whether the cgroup scope of the mount of key is still there.
func mountScopeExists(t *testing.T, key string) bool {
	root, err := harness.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(filepath.Join(root, "mountkeeper.slice", "mount-"+key))
	return err == nil
}

// scopeCgroups are the scopes mountkeeper makes for its network mounts of keys (and on a
// hybrid host a group in each cgroup v1 hierarchy): those of this test's mounts, since other
// tests' mounts may come and go in the same slice meanwhile.
func scopeCgroups(t testing.TB, keys []string) []string {
	t.Helper()
	root, err := harness.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	_ = filepath.WalkDir(filepath.Join(root, "mountkeeper.slice"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(p, k) }) {
			out = append(out, p)
		}
		return nil
	})
	return out
}
