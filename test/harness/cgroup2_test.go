package harness

import (
	"os"
	"os/exec"
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
	defer os.Remove(cg.Dir)
	cmd := exec.Command("sleep", "100")
	if err := StartInCgroup(cmd, cg.Dir); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	pid := strconv.Itoa(cmd.Process.Pid)
	for comm, _, _ := procStat(pid); comm != "sleep"; comm, _, _ = procStat(pid) {
		time.Sleep(time.Millisecond) // until the child has run exec
	}
	d := describeProcs([]string{pid})
	for _, want := range []string{pid + " (sleep, state ", ", parent " + strconv.Itoa(os.Getpid()) + ", waiting in "} {
		if !strings.Contains(d, want) {
			t.Errorf("describeProcs = %q, want %q in it", d, want)
		}
	}
	if err := cg.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, state, _ := procStat(pid); state != "Z" {
		t.Errorf("after Remove the sleep is in state %s, want Z (killed, not reaped)", state)
	}
	if _, err := os.Stat(cg.Dir); !os.IsNotExist(err) {
		t.Errorf("the cgroup is still there: %v", err)
	}
}
