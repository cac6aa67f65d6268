package hostns_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/hostns"
	"github.com/mountkeeper/mountkeeper/internal/reexec"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

const (
	entering = "mountkeeper-hostns-test-entering" // calls Enter, as `mountkeeper nri --host-namespaces` does
	entered  = "mountkeeper-hostns-test-entered"  // what Enter starts: reports where it runs
)

// report is what the entered process saw.
type report struct {
	Args   []string
	MntNS  string
	CgNS   string
	Config string // the handed-over config, read through its new path
	Cwd    string
}

func init() {
	reexec.Register(entering, func() {
		// argv: pid config
		err := hostns.Enter(entered, []string{"--log-level=debug"}, os.Args[1], os.Args[2], nil)
		os.Stderr.WriteString("Enter returned: " + err.Error())
		os.Exit(3)
	})
	reexec.Register(entered, func() {
		r := report{Args: os.Args[1:]}
		r.MntNS, _ = os.Readlink("/proc/self/ns/mnt")
		r.CgNS, _ = os.Readlink("/proc/self/ns/cgroup")
		r.Cwd, _ = os.Getwd()
		for i, a := range os.Args {
			if a == "--config" && i+1 < len(os.Args) {
				b, _ := os.ReadFile(os.Args[i+1])
				r.Config = string(b)
			}
		}
		_ = json.NewEncoder(os.Stdout).Encode(r)
	})
}

func TestMain(m *testing.M) { reexec.RunTests(m) }

func TestEnterRunsTheEntryInTheNamespacesOfPID(t *testing.T) {
	testenv.Require(t, "root")
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("runtimeClasses: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// PID 1 of this machine is a sandbox process whose namespaces cannot be opened, so the
	// "host" is this test process: the entering child starts in mount and cgroup namespaces
	// of its own and must come back into ours.
	cmd := reexec.Command(entering, strconv.Itoa(os.Getpid()), config)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWCGROUP}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("entering: %v (%s)", err, stderrOf(err))
	}
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("the entered process said %q: %v", out, err)
	}
	for _, ns := range []struct{ name, got string }{{"mnt", r.MntNS}, {"cgroup", r.CgNS}} {
		want, err := os.Readlink("/proc/self/ns/" + ns.name)
		if err != nil {
			t.Fatal(err)
		}
		if ns.got != want {
			t.Errorf("%s namespace of the entered process = %s, want the target's %s", ns.name, ns.got, want)
		}
	}
	if r.Config != "runtimeClasses: {}\n" {
		t.Errorf("config read through the handed-over path = %q, want the file's content", r.Config)
	}
	if len(r.Args) < 1 || r.Args[0] != "--log-level=debug" || !strings.HasPrefix(r.Args[len(r.Args)-1], "/proc/self/fd/") {
		t.Errorf("entered with args %q, want the caller's args then --config /proc/self/fd/N/config.yaml", r.Args)
	}
	if r.Cwd != "/" {
		t.Errorf("entered process runs in %q, want /", r.Cwd)
	}
}

func TestEnterRefusesABadPID(t *testing.T) {
	for _, pid := range []string{"", "0", "-1", "x"} {
		err := hostns.Enter(entered, nil, pid, "/nonexistent", nil)
		if err == nil || !strings.Contains(err.Error(), "not a process ID") {
			t.Errorf("Enter with pid %q: %v, want 'not a process ID'", pid, err)
		}
	}
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
