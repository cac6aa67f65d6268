//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestSystemdBoot checks the harness's systemd: it boots as PID 1 of its own namespaces
// (running, not degraded), `systemd-run --scope` puts a command in a transient scope below
// the instance's own cgroup, and Close leaves no process, namespace, mount, cgroup or
// directory behind, also when called twice.
func TestSystemdBoot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "systemd")
	start := time.Now()
	sd, err := harness.StartSystemd(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sd.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := sd.WaitRunning(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd booted in %s", time.Since(start).Round(time.Millisecond))

	t.Run("systemd is PID 1 of its namespaces and the system is running", func(t *testing.T) {
		if out, err := sd.Run(ctx, "cat", "/proc/1/comm"); err != nil || strings.TrimSpace(out) != "systemd" {
			t.Errorf("/proc/1/comm inside = %q, %v; want systemd", out, err)
		}
		for _, ns := range []string{"mnt", "pid", "cgroup", "uts", "ipc"} {
			if nsOf(t, os.Getpid(), ns) == nsOf(t, sd.PID(), ns) {
				t.Errorf("systemd shares the test's %s namespace", ns)
			}
		}
		if nsOf(t, os.Getpid(), "net") != nsOf(t, sd.PID(), "net") {
			t.Errorf("systemd has a network namespace of its own; the host's 127.0.0.1 is out of its reach")
		}
		if out, _ := sd.Run(ctx, "systemctl", "is-system-running"); strings.TrimSpace(out) != "running" {
			failed, _ := sd.Run(ctx, "systemctl", "--failed", "--no-pager")
			t.Errorf("system is %q, want running:\n%s", strings.TrimSpace(out), failed)
		}
		if _, err := os.Stat(filepath.Join(sd.Cgroup(), "init.scope")); err != nil {
			t.Errorf("systemd's init.scope is not below the instance's cgroup: %v", err)
		}
	})

	t.Run("systemd-run --scope runs a command in a transient scope", func(t *testing.T) {
		out, err := sd.Run(ctx, "systemd-run", "--scope", "--quiet", "--unit=mk-boot-test.scope", "--", "sh", "-c", "echo hello; cat /proc/self/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "hello\n") || !strings.Contains(out, "0::/system.slice/mk-boot-test.scope\n") {
			t.Errorf("systemd-run --scope printed %q; want hello and the scope's cgroup", out)
		}
		if _, err := sd.Run(ctx, "systemd-run", "--scope", "--quiet", "false"); err == nil {
			t.Errorf("systemd-run --scope false succeeded")
		}
	})

	t.Run("Close leaves nothing behind", func(t *testing.T) {
		pidNS, mntNS := nsOf(t, sd.PID(), "pid"), nsOf(t, sd.PID(), "mnt")
		// Something that Run started and left running in the PID namespace, outside the cgroup.
		go sd.Run(context.Background(), "sleep", "1000")
		time.Sleep(200 * time.Millisecond)
		if len(processesIn(t, pidNS, mntNS)) < 3 {
			t.Fatalf("the test cannot see the processes of the namespaces: %v", processesIn(t, pidNS, mntNS))
		}
		cgroup := sd.Cgroup()
		if err := sd.Close(); err != nil {
			t.Fatal(err)
		}
		if err := sd.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if left := processesIn(t, pidNS, mntNS); len(left) > 0 {
			t.Errorf("processes left in systemd's namespaces: %v", left)
		}
		if _, err := os.Stat(cgroup); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left: %v", cgroup, err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("directory %s left: %v", dir, err)
		}
		mi, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(mi), dir) || strings.Contains(string(mi), "mk-systemd-") {
			t.Errorf("mounts left on the host:\n%s", mi)
		}
	})
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
