//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
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

// systemdConfig is the plugin's config in the systemd scenario. The class mount's
// propagation is None: the host path is a directory of the host (bound into systemd's
// namespaces), but the sshfs mount on it lives only in systemd's mount namespace, so the
// runtime on the host binds an empty directory that is no shared mount.
const systemdConfig = `
stateDir: WORK/state
unmountGrace: 3s
createBudget: 1500ms
runtimeClasses:
  mk-sshfs:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:EXPORT", destination: /data, propagation: None, options: [SSHOPTS]}
`

// systemdUnit runs the plugin as a service; systemd kills its whole cgroup on stop and
// restart (KillMode=control-group, the default).
const systemdUnit = `[Unit]
Description=mountkeeper NRI plugin (e2e)

[Service]
ExecStart=BINARY nri --config CONFIG --socket SOCKET --log-level debug
Restart=no
KillMode=control-group
`

// naiveUnit is the control: an agent that mounts sshfs itself, without a scope of its own,
// as kubelet does where systemd is not PID 1 (kubernetes #48431).
const naiveUnit = `[Unit]
Description=an agent that mounts without a scope (e2e control)

[Service]
ExecStart=/bin/sh -c 'mount -t fuse.sshfs -o SSHOPTS root@127.0.0.1:EXPORT /tmp/naive && exec sleep infinity'
Restart=no
`

// TestSystemdRestart is issue 4's restart scenario under a real systemd booted as PID 1 of
// namespaces of its own (harness.StartSystemd): the plugin runs as a systemd service
// (mountkeeper.service) connected to a containerd on the host through its NRI socket, which
// is bound into the namespaces; sshd serves over loopback (the network namespace is shared).
// A pod of an sshfs class makes the plugin mount the export in a transient scope unit
// (mountkeeper-mount-<key>-<n>.scope), not in the service's cgroup; `systemctl restart
// mountkeeper` kills the service's whole cgroup, yet the FUSE daemon keeps its PID and its
// scope, a reader working in the mount every 100 ms sees no failed read, and the restarted
// plugin adopts the mount instead of mounting again (its journal says so), rebuilds its users
// from the runtime (the mount outlives the grace period while the container runs), serves a
// new container from the same mount, and unmounts once the last container is gone (not before
// the grace period), after which the FUSE daemon exits and systemd collects the scope.
//
// The mount is made in systemd's mount namespace, so the containers that the host's
// containerd creates see an empty directory at /data, not the export: which containers see
// is covered by TestNetworkFilesystem, where plugin and runtime share the host's mount
// namespace. Here reads go through the mount in systemd's namespace (nsenter).
//
// A control subtest first shows that the checks can fail: a service that mounts sshfs in its
// own cgroup loses the FUSE daemon on `systemctl restart`.
func TestSystemdRestart(t *testing.T) {
	testenv.Require(t, sshfsNeeds...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	work := harness.WorkDir(t, "mk-sd-")
	bin, err := harness.BuildMountkeeper(work)
	if err != nil {
		t.Fatal(err)
	}
	sshd, err := harness.StartSSHD(work)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sshd.Stop)
	const content = "hello from sshfs under systemd\n"
	if err := os.WriteFile(filepath.Join(sshd.Export(), "hello"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	sshOpts := []string{"port=" + strconv.Itoa(sshd.Port()), "IdentityFile=" + sshd.IdentityFile(),
		"StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "BatchMode=yes"}
	spec := netspec.Spec{Type: "fuse.sshfs", Source: "root@127.0.0.1:" + sshd.Export(), Options: sshOpts}
	spec.Options = netspec.WithFUSEDefaults(spec.Type, spec.Options) // as the config adds them
	hostPath := netmount.HostPath(filepath.Join(work, "state"), spec)

	ctrd, err := harness.Start(ctx, harness.Options{Handlers: []string{"mk-sshfs"}, NRI: true})
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	t.Cleanup(func() {
		if err := ctrd.Close(); err != nil {
			t.Errorf("cleanup containerd: %v", err)
		}
	})
	// Binary, config, key and state directory live in work; the NRI socket in containerd's
	// directory: both are bound into the namespaces at the same paths.
	config := filepath.Join(work, "config.yaml")
	sdWriteFile(t, config, strings.NewReplacer("WORK", work, "EXPORT", sshd.Export(), "SSHOPTS", strings.Join(sshOpts, ", ")).Replace(systemdConfig))
	unit := filepath.Join(work, "mountkeeper.service")
	sdWriteFile(t, unit, strings.NewReplacer("BINARY", bin, "CONFIG", config, "SOCKET", ctrd.NRISocket()).Replace(systemdUnit))
	naive := filepath.Join(work, "mk-naive.service")
	sdWriteFile(t, naive, strings.NewReplacer("SSHOPTS", strings.Join(sshOpts, ","), "EXPORT", sshd.Export()).Replace(naiveUnit))

	start := time.Now()
	binds := []string{work, ctrd.Dir()}
	if !strings.HasPrefix(bin, work+"/") { // $MOUNTKEEPER_BINARY
		binds = append(binds, bin)
	}
	sd, err := harness.StartSystemd(ctx, filepath.Join(t.TempDir(), "systemd"), binds...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sd.Close(); err != nil {
			t.Errorf("cleanup systemd: %v", err)
		}
	})
	if err := sd.WaitRunning(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd booted in %s", time.Since(start).Round(time.Millisecond))
	s := &sdScenario{t: t, ctx: ctx, sd: sd}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := sd.Run(context.Background(), "journalctl", "--no-pager", "-o", "short-precise", "-n", "300")
			t.Logf("journal of systemd's namespaces (last 300 lines):\n%s", out)
		}
	})

	t.Run("control: a FUSE daemon in the service's own cgroup dies with systemctl restart", func(t *testing.T) {
		s := s.with(t)
		s.run("mkdir", "-p", "/tmp/naive")
		s.run("cp", naive, "/run/systemd/system/mk-naive.service")
		s.run("systemctl", "daemon-reload")
		s.run("systemctl", "start", "mk-naive")
		t.Cleanup(func() { sd.Run(context.Background(), "systemctl", "stop", "mk-naive") })
		var daemon int
		eventually(t, 20*time.Second, "the control service mounts sshfs", func() bool {
			daemon = s.fuseDaemon("/tmp/naive")
			return daemon != 0
		})
		if cg := s.cgroupOf(daemon); cg != "/system.slice/mk-naive.service" {
			t.Fatalf("the control's FUSE daemon is in %s, want /system.slice/mk-naive.service", cg)
		}
		s.run("systemctl", "restart", "mk-naive")
		if sdAlive(daemon) {
			t.Errorf("FUSE daemon %d of the control survived systemctl restart: the restart checks below could not fail", daemon)
		}
	})

	s.run("cp", unit, "/run/systemd/system/mountkeeper.service")
	s.run("systemctl", "daemon-reload")
	s.run("systemctl", "start", "mountkeeper")
	if !s.awaitJournal(s.invocation(), "connected to", 30*time.Second) {
		t.FailNow()
	}

	cri := ctrd.CRI()
	pod, err := cri.RunPod(ctx, harness.PodOptions{Name: "sshfs-pod", RuntimeHandler: "mk-sshfs"})
	if err != nil {
		t.Fatal(err)
	}
	c1 := s.createContainer(cri, pod, "c1")

	var daemon int
	var scope string
	t.Run("the mount lands in a transient scope, not in the service's cgroup", func(t *testing.T) {
		s := s.with(t)
		if got := s.read(filepath.Join(hostPath, "hello")); got != content {
			t.Errorf("read %q through the mount in systemd's namespace, want %q", got, content)
		}
		if n := s.fuseMounts(hostPath); n != 1 {
			t.Errorf("%d fuse.sshfs mounts at %s, want 1", n, hostPath)
		}
		daemon = s.fuseDaemon(hostPath)
		if daemon == 0 {
			t.Fatalf("no FUSE daemon serves %s", hostPath)
		}
		cg := s.cgroupOf(daemon)
		scope = strings.TrimPrefix(cg, "/system.slice/")
		if !regexp.MustCompile(`^mountkeeper-mount-` + spec.Key() + `-[0-9a-z]+\.scope$`).MatchString(scope) {
			t.Fatalf("the FUSE daemon %d is in cgroup %s, want /system.slice/mountkeeper-mount-%s-<n>.scope", daemon, cg, spec.Key())
		}
		if units := s.run("systemctl", "list-units", "--type=scope", "--state=running", "--plain", "--no-legend", "--no-pager"); !strings.Contains(units, scope) {
			t.Errorf("systemctl does not list %s as a running scope:\n%s", scope, units)
		}
		if procs := s.cgroupProcs("/system.slice/mountkeeper.service"); len(procs) != 1 {
			var names []string
			for _, pid := range procs {
				names = append(names, strconv.Itoa(pid)+" "+sdComm(pid))
			}
			t.Errorf("mountkeeper.service's cgroup holds %v, want the plugin alone", names)
		}
	})
	if daemon == 0 {
		t.FailNow()
	}

	t.Run("systemctl restart keeps the mount alive and the plugin adopts it", func(t *testing.T) {
		s := s.with(t)
		// A reader in systemd's namespaces reads the mount every 100 ms across the restart.
		// Its working directory is in the mount: like a container's bind, it keeps the mount it
		// started on, so a mount replaced by a new one (after its daemon died) reads as
		// failed, not as a success of the new mount.
		hello := filepath.Join(hostPath, "hello")
		s.run("systemd-run", "--unit=mk-reader", "--quiet", "--working-directory="+hostPath, "--", "/bin/sh", "-c",
			"while true; do if cat hello >/dev/null 2>&1; then echo ok; else echo FAIL; fi >> /tmp/reads; sleep 0.1; done")
		defer s.run("systemctl", "stop", "mk-reader")
		eventually(t, 10*time.Second, "the reader reads", func() bool { ok, _ := s.reads(); return ok >= 2 })
		before, _ := s.reads()
		oldMain, oldInvocation := s.mainPID(), s.invocation()
		restarted := time.Now()
		s.run("systemctl", "restart", "mountkeeper")
		inv := s.invocation()
		if newMain := s.mainPID(); newMain == oldMain || inv == oldInvocation || sdAlive(oldMain) {
			t.Fatalf("systemctl restart did not restart the plugin: main PID %d -> %d, invocation %s -> %s", oldMain, newMain, oldInvocation, inv)
		}
		if !sdAlive(daemon) {
			t.Errorf("FUSE daemon %d did not survive the restart", daemon)
		} else if cg := s.cgroupOf(daemon); cg != "/system.slice/"+scope {
			t.Errorf("FUSE daemon moved to %s", cg)
		}
		if s.awaitJournal(inv, "adopted the mount found at start-up", 10*time.Second) {
			t.Logf("the restarted plugin adopted the mount within %s of systemctl restart", time.Since(restarted).Round(time.Millisecond))
		}
		if got := s.read(hello); got != content {
			t.Errorf("read %q through the mount after the restart", got)
		}
		time.Sleep(time.Until(restarted.Add(2 * time.Second)))
		if ok, fails := s.reads(); fails > 0 || ok < before+10 {
			t.Errorf("reads across the restart: %d ok (%d before it), %d failed", ok, before, fails)
		} else {
			t.Logf("reads across the restart: %d ok (%d before it), none failed", ok, before)
		}
		if now := s.fuseDaemon(hostPath); now != daemon {
			t.Errorf("the mount is served by FUSE daemon %d after the restart, want %d", now, daemon)
		}
		if n := s.fuseMounts(hostPath); n != 1 {
			t.Errorf("%d fuse.sshfs mounts at %s after the restart, want 1", n, hostPath)
		}
		if log := s.journal(inv); strings.Contains(log, `msg="netmount: mounted"`) {
			t.Errorf("the restarted plugin mounted again:\n%s", log)
		}
	})

	t.Run("the restarted plugin keeps the mount for the running container and serves a new one", func(t *testing.T) {
		s := s.with(t)
		// Synchronize must have counted c1 as a user: an unused adopted mount would be
		// unmounted once the 3s grace period is over.
		time.Sleep(5 * time.Second)
		if s.fuseDaemon(hostPath) != daemon || s.fuseMounts(hostPath) != 1 {
			t.Fatalf("the mount of running container c1 went away after the restart (daemon %d, %d mounts)", s.fuseDaemon(hostPath), s.fuseMounts(hostPath))
		}
		c2 := s.createContainer(cri, pod, "c2")
		if s.fuseDaemon(hostPath) != daemon || s.fuseMounts(hostPath) != 1 {
			t.Errorf("container c2 got another mount (daemon %d, %d mounts)", s.fuseDaemon(hostPath), s.fuseMounts(hostPath))
		}
		// The container's /data is a bind of the host path (an empty directory on the host:
		// the mount itself is in systemd's mount namespace).
		out, _, _, err := cri.Exec(ctx, c2, "cat", "/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if line := mountinfoLine(out, "/data"); len(strings.Fields(line)) < 4 || strings.Fields(line)[3] != hostPath {
			t.Errorf("container c2's /data is not a bind of %s: %q", hostPath, line)
		}
		for _, id := range []string{c1, c2} {
			cri.StopContainer(ctx, id)
			if err := cri.RemoveContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		removed := time.Now()
		eventually(t, 20*time.Second, "the mount is unmounted after the grace period", func() bool { return s.fuseMounts(hostPath) == 0 })
		took := time.Since(removed)
		t.Logf("unmounted %s after the last container was removed (grace 3s)", took.Round(time.Millisecond))
		if took < 3*time.Second {
			t.Errorf("unmounted %s after the last container was removed, within the 3s grace period", took)
		}
		eventually(t, 10*time.Second, "the FUSE daemon exits and systemd collects its scope", func() bool {
			return !sdAlive(daemon) && !strings.Contains(s.run("systemctl", "list-units", "--all", "--type=scope", "--plain", "--no-legend", "--no-pager"), scope)
		})
	})
}

// sdScenario runs the checks of TestSystemdRestart in systemd's namespaces.
type sdScenario struct {
	t   *testing.T
	ctx context.Context
	sd  *harness.Systemd
}

// with returns s reporting to t (a subtest).
func (s *sdScenario) with(t *testing.T) *sdScenario {
	c := *s
	c.t = t
	return &c
}

// run runs argv in systemd's namespaces; it fails the test if argv fails.
func (s *sdScenario) run(argv ...string) string {
	s.t.Helper()
	out, err := s.sd.Run(s.ctx, argv...)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// read reads a file through the mount in systemd's namespace, within 10s.
func (s *sdScenario) read(path string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	out, err := s.sd.Run(ctx, "cat", path)
	if err != nil {
		s.t.Errorf("read %s: %v", path, err)
	}
	return out
}

// reads counts the reads of the mk-reader service that succeeded and failed.
func (s *sdScenario) reads() (ok, fails int) {
	s.t.Helper()
	out, err := s.sd.Run(s.ctx, "cat", "/tmp/reads")
	if err != nil {
		return 0, 0
	}
	return strings.Count(out, "ok\n"), strings.Count(out, "FAIL\n")
}

// fuseMounts counts the fuse.sshfs mounts at path in systemd's mount namespace.
func (s *sdScenario) fuseMounts(path string) int {
	s.t.Helper()
	n := 0
	for _, line := range strings.Split(s.run("cat", "/proc/1/mountinfo"), "\n") {
		pre, post, _ := strings.Cut(line, " - ")
		if f := strings.Fields(pre); len(f) > 4 && f[4] == path && strings.HasPrefix(post, "fuse.sshfs ") {
			n++
		}
	}
	return n
}

// fuseDaemon returns the host PID of the FUSE daemon serving path in systemd's namespaces
// (sshfs, run as mount.fuse.sshfs by mount(8)), or 0 if there is none. It fails the test if
// several serve it.
func (s *sdScenario) fuseDaemon(path string) int {
	s.t.Helper()
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !sdAlive(pid) || s.cgroupOf(pid) == "" {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv := strings.Split(string(cmdline), "\x00")
		if prog := filepath.Base(argv[0]); (prog == "sshfs" || prog == "mount.fuse.sshfs") && slices.Contains(argv, path) {
			pids = append(pids, pid)
		}
	}
	switch len(pids) {
	case 0:
		return 0
	case 1:
		return pids[0]
	}
	s.t.Fatalf("several FUSE daemons serve %s: %v", path, pids)
	return 0
}

// cgroupOf returns the cgroup of a host PID as systemd sees it ("/system.slice/x.service"),
// or "" if the process is not in systemd's cgroup.
func (s *sdScenario) cgroupOf(pid int) string {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return ""
	}
	root := "/" + filepath.Base(s.sd.Cgroup())
	for _, line := range strings.Split(string(data), "\n") {
		if cg, ok := strings.CutPrefix(line, "0::"); ok {
			if rest, ok := strings.CutPrefix(cg, root); ok && (rest == "" || rest[0] == '/') {
				return rest
			}
		}
	}
	return ""
}

// cgroupProcs lists the host PIDs in a cgroup of systemd's ("/system.slice/x.service").
func (s *sdScenario) cgroupProcs(cg string) []int {
	s.t.Helper()
	data, err := os.ReadFile(filepath.Join(s.sd.Cgroup(), cg, "cgroup.procs"))
	if err != nil {
		s.t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// mainPID returns the host PID of mountkeeper.service's main process (the plugin).
func (s *sdScenario) mainPID() int {
	s.t.Helper()
	// systemd names it by its PID in systemd's PID namespace: the last NSpid field.
	inner := strings.TrimSpace(s.run("systemctl", "show", "--property=MainPID", "--value", "mountkeeper"))
	for _, pid := range s.cgroupProcs("/system.slice/mountkeeper.service") {
		status, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] == inner {
				return pid
			}
		}
	}
	s.t.Fatalf("mountkeeper.service has no main process (MainPID=%s)", inner)
	return 0
}

// invocation returns mountkeeper.service's invocation ID: it changes with every start.
func (s *sdScenario) invocation() string {
	s.t.Helper()
	return strings.TrimSpace(s.run("systemctl", "show", "--property=InvocationID", "--value", "mountkeeper"))
}

// journal returns what one invocation of mountkeeper.service logged.
func (s *sdScenario) journal(invocation string) string {
	s.t.Helper()
	return s.run("journalctl", "--no-pager", "-o", "cat", "_SYSTEMD_INVOCATION_ID="+invocation)
}

// awaitJournal waits until an invocation of mountkeeper.service logged substr and returns
// true; it reports an error and returns false if that does not happen within timeout or the
// service stops first.
func (s *sdScenario) awaitJournal(invocation, substr string, timeout time.Duration) bool {
	s.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		log := s.journal(invocation)
		if strings.Contains(log, substr) {
			return true
		}
		if state, _ := s.sd.Run(s.ctx, "systemctl", "is-active", "mountkeeper"); strings.TrimSpace(state) != "active" {
			s.t.Errorf("mountkeeper.service is %s and did not log %q:\n%s", strings.TrimSpace(state), substr, log)
			return false
		}
		if time.Now().After(deadline) {
			s.t.Errorf("mountkeeper.service did not log %q within %s:\n%s", substr, timeout, log)
			return false
		}
	}
}

// createContainer creates and starts a container in pod, retrying as kubelet does while the
// plugin says the network mount is not ready.
func (s *sdScenario) createContainer(cri *harness.Client, pod, name string) string {
	s.t.Helper()
	start := time.Now()
	for {
		id, err := cri.CreateContainer(s.ctx, pod, harness.ContainerOptions{Name: name})
		if err == nil {
			if err := cri.StartContainer(s.ctx, id); err != nil {
				s.t.Fatal(err)
			}
			s.t.Logf("container %s created in %s", name, time.Since(start).Round(time.Millisecond))
			return id
		}
		if !strings.Contains(err.Error(), "not ready") || time.Since(start) > 30*time.Second {
			s.t.Fatalf("create container %s: %v", name, err)
		}
		s.t.Logf("create container %s: %v (retrying)", name, err)
		time.Sleep(500 * time.Millisecond)
	}
}

func sdAlive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

func sdComm(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(b))
}

func sdWriteFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
