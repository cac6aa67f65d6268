package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestCgroupKill: kill ends a process of the group and returns although nothing has reaped
// it yet (a zombie does not keep a cgroup populated), so the group can be removed.
func TestCgroupKill(t *testing.T) {
	testenv.Require(t, "root")
	cg, err := NewCgroup2("mountkeeper-test-kill-" + strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.Remove() }) // after a failure: kills what is left, removes the group
	cmd := exec.Command("sleep", "100")
	if err := StartInCgroup(cmd, cg.Dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if p, _ := readProcess(cmd.Process.Pid); p.comm == "sleep" {
			break // the child has run exec
		}
		if time.Now().After(deadline) {
			t.Fatal("the child has not run sleep after 10s")
		}
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	d := describeProcs([]int{cmd.Process.Pid})
	for _, want := range []string{pid + " (sleep, state ", ", parent " + strconv.Itoa(os.Getpid()) + ", waiting in ", `, command "sleep 100")`} {
		if !strings.Contains(d, want) {
			t.Errorf("describeProcs = %q, want %q in it", d, want)
		}
	}
	if err := cg.Remove(); err != nil {
		t.Fatal(err)
	}
	if p, err := readProcess(cmd.Process.Pid); err != nil || p.state != 'Z' {
		t.Errorf("after Remove the sleep is in state %c (%v), want Z (killed, not reaped)", p.state, err)
	}
	if _, err := os.Stat(cg.Dir); !os.IsNotExist(err) {
		t.Errorf("the cgroup is still there: %v", err)
	}
}

// TestRemoveCgroupIfEmpty: an empty cgroup is removed; one that holds a cgroup (another
// kubelet's pods below /k8s.io) is left, and that is no error.
func TestRemoveCgroupIfEmpty(t *testing.T) {
	testenv.Require(t, "root")
	root, err := Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	name := "/mountkeeper-test-ifempty-" + strconv.Itoa(os.Getpid())
	child := filepath.Join(root, name, "someone-elses")
	if err := os.MkdirAll(child, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(child); os.Remove(filepath.Join(root, name)) })
	if err := removeCgroupIfEmpty(name); err != nil {
		t.Errorf("a cgroup holding another's: %v, want no error", err)
	}
	if _, err := os.Stat(child); err != nil {
		t.Fatalf("the cgroup holding another's was removed: %v", err)
	}
	if err := os.Remove(child); err != nil {
		t.Fatal(err)
	}
	if err := removeCgroupIfEmpty(name); err != nil {
		t.Errorf("an empty cgroup: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, name)); !os.IsNotExist(err) {
		t.Errorf("the empty cgroup is still there: %v", err)
	}
}

// TestCgroup2CPU: a cgroup's CPU time counts what its processes used, a process that has
// exited included; a cgroup that does not exist has used none.
func TestCgroup2CPU(t *testing.T) {
	testenv.Require(t, "root")
	cg, err := NewCgroup2("mountkeeper-test-cpu-" + strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cg.Remove() })
	before, err := Cgroup2CPU(cg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	// Busy for 0.2 s of its own CPU time, then gone.
	cmd := exec.Command("sh", "-c", `while :; do read -r s </proc/$$/stat; set -- $s; [ $((${14} + ${15})) -ge 20 ] && exit; done`)
	if err := StartInCgroup(cmd, cg.Dir); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	used, err := Cgroup2CPU(cg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if used-before < 200*time.Millisecond {
		t.Errorf("the cgroup used %s of CPU (%s before a process busy for 0.2 s of its own), want at least 0.2 s", used, before)
	}
	if got, err := Cgroup2CPU(filepath.Join(cg.Dir, "absent")); got != 0 || err != nil {
		t.Errorf("a cgroup that does not exist: %s, %v; want 0, nil", got, err)
	}
}
