package netmount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestCgroupScoperLeavesV1Groups: on a host with cgroup v1 hierarchies beside cgroup2 (this
// one), the helper and a child it forked at once leave the agent's v1 groups for the unit's own,
// so that a supervisor killing by the agent's v1 groups cannot reach the FUSE daemon; Remove
// removes those groups again.
func TestCgroupScoperLeavesV1Groups(t *testing.T) {
	sc := testCgroupScoper(t)
	hierarchies, err := v1Hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	if len(hierarchies) == 0 {
		testenv.Skip(t, "no cgroup v1 hierarchy on this host: nothing to leave")
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithCancel(context.Background())
	// The child is forked before the parent can be moved: leaveV1 must still catch it.
	cmd, err := sc.Start(ctx, Job{Unit: "mount-v1", Argv: []string{"/bin/sh", "-c", "sleep 60 & echo $!; wait"}, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	var child int
	for deadline := time.Now().Add(5 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		data, _ := os.ReadFile(out.Name())
		if line, _, ok := strings.Cut(string(data), "\n"); ok {
			child, _ = strconv.Atoi(line)
		}
	}
	if child == 0 {
		t.Fatal("the helper did not report its child")
	}
	want := "/" + sc.Parent + "/mount-v1"
	for _, pid := range []int{cmd.Process.Pid, child} {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 || parts[0] == "0" {
				continue // cgroup2: checked by TestCgroupScoperLive
			}
			if parts[2] != want {
				t.Errorf("pid %d is in v1 group %s:%s, want %s", pid, parts[1], parts[2], want)
			}
		}
	}
	cancel()
	cmd.Wait()
	if err := sc.Kill("mount-v1"); err != nil {
		t.Fatal(err)
	}
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, sc.Parent, "mount-v1")); !os.IsNotExist(err) {
			t.Errorf("the unit's group in %s is left: %v", h, err)
		}
	}
}

// removeV1Trees removes parent and the groups below it in every v1 hierarchy, deepest first
// (their processes are gone with the cgroup2 tree).
func removeV1Trees(parent string) error {
	var errs []error
	hierarchies, _ := v1Hierarchies()
	for _, h := range hierarchies {
		var dirs []string
		filepath.WalkDir(filepath.Join(h, parent), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				errs = append(errs, fmt.Errorf("remove v1 group: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// TestCgroupScoperSettleMovesLateProcesses: a process that joined the unit's cgroup2 group
// without being moved (as one forked between leaveV1's read and its move would) leaves the
// agent's v1 groups at Settle, which the mount runs once the helper exited.
func TestCgroupScoperSettleMovesLateProcesses(t *testing.T) {
	sc := testCgroupScoper(t)
	if hs, _ := v1Hierarchies(); len(hs) == 0 {
		testenv.Skip(t, "no cgroup v1 hierarchy on this host")
	}
	dir := sc.Dir("mount-late")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	late := exec.Command("sleep", "60")
	if err := harness.StartInCgroup(late, dir); err != nil {
		t.Fatal(err)
	}
	defer func() { late.Process.Kill(); late.Wait() }()
	if err := sc.Settle("mount-late"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(late.Process.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	want := "/" + sc.Parent + "/mount-late"
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[0] != "0" && parts[2] != want {
			t.Errorf("after Settle the late process is in v1 group %s:%s, want %s", parts[1], parts[2], want)
		}
	}
}
