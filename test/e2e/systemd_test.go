//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
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
		left, err := testsupport.Mounts(0, func(m *mountinfo.Info) (skip, stop bool) {
			l := mountLine(m)
			return !strings.Contains(l, dir) && !strings.Contains(l, "mk-systemd-"), false
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Errorf("mounts left on the host:\n%s", mountLines(left))
		}
	})
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

// TestSystemdRestart: restarting the agent's service must not take its network mounts with it.
// It runs under a real systemd booted as PID 1 of namespaces of its own
// (harness.StartSystemd): the plugin runs as a systemd service (mountkeeper.service) connected
// to a containerd on the host through its NRI socket, which is bound into the namespaces; sshd
// serves over loopback (the network namespace is shared). A pod of an sshfs class makes the
// plugin mount the export in a transient scope unit (mountkeeper-mount-<key>-<n>.scope), not
// in the service's cgroup; `systemctl restart mountkeeper` kills the service's whole cgroup,
// yet the FUSE daemon keeps its PID and its scope, a reader working in the mount every 100 ms
// sees no failed read, and the restarted plugin adopts the mount instead of mounting again
// (its journal says so), rebuilds its users from the runtime (the mount outlives the grace
// period while the container runs), serves a new container from the same mount, and unmounts
// once the last container is gone (not before the grace period), after which the FUSE daemon
// exits and systemd collects the scope.
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
		testsupport.Eventually(t, 20*time.Second, 100*time.Millisecond, "the control service mounts sshfs", func() bool {
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
		testsupport.Eventually(t, 10*time.Second, 100*time.Millisecond, "the reader reads", func() bool { ok, _ := s.reads(); return ok >= 2 })
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
		if m := mountIn(t, out, "/data"); m == nil || m.Root != hostPath {
			t.Errorf("container c2's /data is not a bind of %s: %q", hostPath, mountLine(m))
		}
		for _, id := range []string{c1, c2} {
			cri.StopContainer(ctx, id)
			if err := cri.RemoveContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		removed := time.Now()
		testsupport.Eventually(t, 20*time.Second, 100*time.Millisecond, "the mount is unmounted after the grace period", func() bool { return s.fuseMounts(hostPath) == 0 })
		took := time.Since(removed)
		t.Logf("unmounted %s after the last container was removed (grace 3s)", took.Round(time.Millisecond))
		if took < 3*time.Second {
			t.Errorf("unmounted %s after the last container was removed, within the 3s grace period", took)
		}
		testsupport.Eventually(t, 10*time.Second, 100*time.Millisecond, "the FUSE daemon exits and systemd collects its scope", func() bool {
			return !sdAlive(daemon) && !strings.Contains(s.run("systemctl", "list-units", "--all", "--type=scope", "--plain", "--no-legend", "--no-pager"), scope)
		})
	})
}
