//go:build kernels

package vm

import (
	"context"
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
