//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

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
	for _, m := range mountsIn(s.t, s.run("cat", "/proc/1/mountinfo"), path) {
		if m.FSType == "fuse.sshfs" {
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
	if cg, ok := testsupport.ParseCgroupV2(string(data)); ok {
		if rest, ok := strings.CutPrefix(cg, root); ok && (rest == "" || rest[0] == '/') {
			return rest
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

// systemdNode is a node like the operators' (kubeadm's): systemd is the init of the node's
// namespaces, containerd and kubelet are its services (harness.ContainerdUnit,
// harness.KubeletUnit) on the systemd cgroup driver, with the QoS cgroups (kubepods.slice).
// containerd's config is kubeadm's default handler: `runc` with SystemdCgroup = true,
// BinaryName and Root; no runtime class handler until `mountkeeper runtime configure` adds one.
// The embedded kubeNode drives pods through the API as the other kube tests do.
type systemdNode struct {
	kubeNode
	sd      *harness.Systemd
	config  string // mountkeeper's config (kubeClassConfig)
	wrapper string // mountkeeper-runtime, which configure installs
}

// newSystemdNode boots the node: systemd (hybrid cgroups, see harness.SystemdOptions), then
// containerd and kubelet as its services, then the RuntimeClass mk-kube. mountkeeper is built
// and its config written, but neither configured into containerd nor started: see configure
// and startPlugin. Everything is torn down when the test ends, passed or not.
func newSystemdNode(t *testing.T, ctx context.Context) *systemdNode {
	t.Helper()
	testenv.Require(t, "root", harness.SystemdBinary, "unshare", "nsenter", "dbus-daemon")
	if why := harness.KubeMissing(harness.KubeOptions{}); why != "" {
		testenv.Skip(t, "no Kubernetes node: %s", why)
	}
	n := &systemdNode{kubeNode: *prepareKubeNode(t, ctx)}

	start := time.Now()
	// The work directory (sources, state, config) and the binaries are bound in: configure,
	// the runtime wrapper and the class mounts' sources run and resolve inside, where /tmp is
	// a tmpfs of the node's own (a checkout under /tmp is not visible there otherwise).
	var err error
	if n.wrapper, err = harness.BuildRuntimeWrapper(n.dir); err != nil {
		t.Fatal(err)
	}
	binds := append([]string{n.dir}, harness.KubeletSystemdBinds...)
	for _, bin := range []string{n.bin, n.wrapper} {
		if !strings.HasPrefix(bin, n.dir+"/") {
			binds = append(binds, bin)
		}
	}
	n.sd, err = harness.StartSystemdWith(ctx, filepath.Join(t.TempDir(), "systemd"), harness.SystemdOptions{Binds: binds, CgroupV1: true})
	if err != nil {
		t.Fatalf("boot systemd: %v", err)
	}
	t.Cleanup(func() {
		if err := n.sd.Close(); err != nil {
			t.Errorf("cleanup systemd: %v", err)
		}
	})
	if err := n.sd.WaitRunning(ctx); err != nil {
		t.Fatal(err)
	}
	booted := time.Since(start)

	n.startKube(harness.Options{Systemd: n.sd, NRI: true}, harness.KubeOptions{Systemd: n.sd}, []string{"mk-kube"})
	t.Logf("systemd node up in %s (systemd booted in %s; then containerd, etcd, kube-apiserver, kubelet registered)",
		time.Since(start).Round(time.Millisecond), booted.Round(time.Millisecond))

	// startPlugin(true) writes the same file again.
	n.config = filepath.Join(n.dir, "config.yaml")
	text := strings.NewReplacer("KUBELET", n.kube.RootDir(), "SRC", filepath.Join(n.dir, "src"),
		"REPAIR", "true").Replace(kubeClassConfig)
	if err := os.WriteFile(n.config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// configure runs `mountkeeper runtime configure` on the node, as an operator (or the
// DaemonSet's init container) does there, with extra flags, and returns its output.
func (n *systemdNode) configure(extra ...string) string {
	n.t.Helper()
	args := append([]string{n.bin, "runtime", "configure", "--runtime", "containerd", "--config", n.config,
		"--config-file", n.ctrd.ConfigPath(), "--runtime-binary", n.wrapper}, extra...)
	out, err := n.sd.Run(n.ctx, args...)
	if err != nil {
		n.t.Fatalf("runtime configure: %v\n%s", err, out)
	}
	return out
}

// podLimits is a Guaranteed pod's resources: requests equal limits.
type podLimits struct {
	memory   int64 // bytes
	cpuMilli int64
}

func (l podLimits) resources() map[string]any {
	r := map[string]string{"memory": strconv.FormatInt(l.memory, 10), "cpu": fmt.Sprintf("%dm", l.cpuMilli)}
	return map[string]any{"limits": r, "requests": r}
}

// containerCgroup is where a container's process is, and the limits there.
type containerCgroup struct {
	raw                 string // its /proc/PID/cgroup
	memoryPath, cpuPath string // relative to the node's cgroup namespace root
	memory              int64  // bytes; -1 for none, -2 unreadable
	cpuQuota, cpuPeriod int64  // microseconds; quota -1 for none, -2 unreadable
}

// cgroupOf reads, inside the node, the cgroup of the container's process and its memory
// and CPU limits: from the v1 memory and cpu hierarchies (memory.limit_in_bytes,
// cpu.cfs_quota_us) on the hybrid node, from cgroup2 (memory.max, cpu.max) on a unified one.
func (n *systemdNode) cgroupOf(id string) containerCgroup {
	n.t.Helper()
	// The container's process as containerd sees it: in the node's PID namespace. Its
	// /proc/PID/cgroup is read by a process in the node's cgroup namespace (not through the
	// container, whose view of cgroup paths is its own).
	resp, err := n.ctrd.CRI().RuntimeService().ContainerStatus(n.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		n.t.Fatalf("container %.12s: status: %v", id, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		n.t.Fatalf("container %.12s: no pid in its verbose status (%v): %q", id, err, resp.GetInfo()["info"])
	}
	out, err := n.sd.Run(n.ctx, "cat", fmt.Sprintf("/proc/%d/cgroup", info.Pid))
	if err != nil {
		n.t.Fatalf("container %.12s: %v", id, err)
	}
	paths := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 {
			for _, c := range strings.Split(f[1], ",") {
				paths[c] = f[2]
			}
		}
	}
	// A container outside the node's cgroup tree has paths with ".." that reach nothing
	// inside: its limits are unreadable (-2), and the check of its path says why.
	read := func(file string) string {
		v, err := n.sd.Run(n.ctx, "cat", file)
		if err != nil {
			n.t.Logf("container %.12s: %v", id, err)
			return "-2"
		}
		return strings.TrimSpace(v)
	}
	num := func(s string) int64 {
		if s == "max" {
			return -1
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			n.t.Errorf("container %.12s: cgroup value %q: %v", id, s, err)
			return -2
		}
		return v
	}
	cg := containerCgroup{raw: out}
	if mem, ok := paths["memory"]; ok {
		cg.memoryPath, cg.cpuPath = mem, paths["cpu"]
		cg.memory = num(read("/sys/fs/cgroup/memory" + mem + "/memory.limit_in_bytes"))
		if cg.memory >= 1<<62 { // v1's "no limit" is the largest page-aligned value
			cg.memory = -1
		}
		cg.cpuQuota = num(read("/sys/fs/cgroup/cpu" + cg.cpuPath + "/cpu.cfs_quota_us"))
		cg.cpuPeriod = num(read("/sys/fs/cgroup/cpu" + cg.cpuPath + "/cpu.cfs_period_us"))
		return cg
	}
	unified := paths[""]
	cg.memoryPath, cg.cpuPath = unified, unified
	cg.memory = num(read("/sys/fs/cgroup" + unified + "/memory.max"))
	quota, period, _ := strings.Cut(read("/sys/fs/cgroup"+unified+"/cpu.max"), " ")
	cg.cpuQuota, cg.cpuPeriod = num(quota), num(period)
	return cg
}
