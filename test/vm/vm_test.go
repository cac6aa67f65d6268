//go:build kernels

package vm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRun boots each kernel and runs a command that prints the kernel's release and exits 7:
// both come back.
func TestRun(t *testing.T) {
	for _, k := range Kernels(t) {
		t.Run(k.Name, func(t *testing.T) {
			res, err := Run(context.Background(), k, Options{
				Argv:    []string{"sh", "-c", `uname -r; ls /dev/shm >/dev/null && grep -q " /sys/fs/cgroup cgroup2 " /proc/mounts && echo ok; exit 7`},
				Timeout: 2 * time.Minute,
			})
			if err != nil {
				t.Fatalf("%v\nconsole:\n%s\noutput:\n%s", err, res.Console, res.Output)
			}
			if want := k.Release + "\nok\n"; string(res.Output) != want || res.ExitCode != 7 {
				t.Fatalf("got output %q, exit %d; want %q, exit 7\nconsole:\n%s", res.Output, res.ExitCode, want, res.Console)
			}
			t.Logf("%s: %v", k.Name, res.Elapsed)
		})
	}
}

// TestRunHang: a guest that never ends is killed at the deadline, and Run says so.
func TestRunHang(t *testing.T) {
	k := Kernels(t)[0]
	res, err := Run(context.Background(), k, Options{Argv: []string{"sh", "-c", "echo started; sleep 1000"}, Timeout: 40 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "killed at the deadline") {
		t.Fatalf("err = %v, want a kill at the deadline\noutput:\n%s", err, res.Output)
	}
	if string(res.Output) != "started\n" {
		t.Fatalf("output %q, want what the guest printed before the deadline", res.Output)
	}
}

// TestRunLockedUp: a guest whose kernel reports a soft lockup and panics (here a crash through
// sysrq after the watchdog's line written to the console: a real lockup cannot be made on
// purpose) is booted again, once, and Run says so; the second boot's end (the same crash) is
// what it returns.
func TestRunLockedUp(t *testing.T) {
	k := Kernels(t)[0]
	const line = "watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [runc:330]"
	res, err := Run(context.Background(), k, Options{
		Argv:    []string{"sh", "-c", "echo booted; echo '<0>" + line + "' >/dev/kmsg; echo c >/proc/sysrq-trigger; sleep 1000"},
		Timeout: 2 * time.Minute,
	})
	if !errors.Is(err, ErrNoExit) || !strings.Contains(res.LockedUp, line) {
		t.Fatalf("err = %v, LockedUp %q; want no exit status and the lockup line\nconsole:\n%s\noutput:\n%s", err, res.LockedUp, res.Console, res.Output)
	}
	if strings.Contains(err.Error(), "killed at the deadline") || string(res.Output) != "booted\n" {
		t.Fatalf("err = %v, output %q: want the second boot's own end, not the deadline", err, res.Output)
	}
	t.Logf("booted twice in %v: %s", res.Elapsed, res.LockedUp)
}
