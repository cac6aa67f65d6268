//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

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

// TestSystemdCgroupNode (issue 24, item 6): on a node like kubeadm's (systemd cgroup driver
// for kubelet and containerd's default handler), containerd configured by `mountkeeper
// runtime configure` runs a pod of a mountkeeper class exactly like a default pod: both land
// in kubelet's kubepods.slice hierarchy, each container in its pod's slice with the memory
// and CPU limits the pod asked for; the class pod also gets its class mount, the default pod
// does not.
func TestSystemdCgroupNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	n := newSystemdNode(t, ctx)

	// configure restarts containerd itself, through the node's systemd, as an operator asks it
	// to (--restart); Reattach finds the new containerd.service process and waits for CRI.
	out := n.configure("--restart")
	t.Logf("runtime configure --restart:\n%s", out)
	if !strings.Contains(out, "restarted containerd (systemctl restart containerd)") {
		t.Errorf("runtime configure --restart does not say it restarted containerd: %s", out)
	}
	if err := n.ctrd.Reattach(n.ctx); err != nil {
		t.Fatal(err)
	}
	// After the restart: the plugin connects to the configured containerd at once, and the
	// guard never sees a class container it has not handled.
	n.startPlugin(true)

	pods := []struct {
		name, class string
		limits      podLimits
	}{
		{"with-class", "mk-kube", podLimits{memory: 64 << 20, cpuMilli: 250}},
		{"plain", "", podLimits{memory: 80 << 20, cpuMilli: 300}},
	}
	ids := map[string]string{}
	for _, p := range pods {
		ids[p.name] = n.runningContainerWith(podSpec{name: p.name, runtimeClass: p.class, script: "exec sleep 3600"},
			func(spec map[string]any) {
				spec["containers"].([]any)[0].(map[string]any)["resources"] = p.limits.resources()
			})
	}
	for _, p := range pods {
		id := ids[p.name]
		cg := n.cgroupOf(id)
		t.Logf("pod %s: container %.12s in memory cgroup %s, cpu cgroup %s: memory limit %d, cpu quota %d/%d; /proc/PID/cgroup:\n%s",
			p.name, id, cg.memoryPath, cg.cpuPath, cg.memory, cg.cpuQuota, cg.cpuPeriod, cg.raw)
		// What containerd gave runc: the cgroup path and the handler's runc options (empty
		// for a handler without an options table: cgroupfs driver, runc from PATH).
		if spec, err := os.ReadFile(filepath.Join(n.ctrd.Dir(), "state", "io.containerd.runtime.v2.task", "k8s.io", id, "config.json")); err == nil {
			var cfg struct {
				Linux struct {
					CgroupsPath string `json:"cgroupsPath"`
				} `json:"linux"`
			}
			_ = json.Unmarshal(spec, &cfg)
			opts, _ := os.ReadFile(filepath.Join(n.ctrd.Dir(), "state", "io.containerd.runtime.v2.task", "k8s.io", id, "options.json"))
			t.Logf("pod %s: OCI cgroupsPath %q, runc options %s", p.name, cfg.Linux.CgroupsPath, opts)
		}
		scope := "/cri-containerd-" + id + ".scope"
		for what, path := range map[string]string{"memory": cg.memoryPath, "cpu": cg.cpuPath} {
			if !strings.HasPrefix(path, "/kubepods.slice/kubepods-pod") || !strings.HasSuffix(path, ".slice"+scope) {
				t.Errorf("pod %s (runtime class %q): its container's %s cgroup is %s; want /kubepods.slice/kubepods-pod<uid>.slice%s, "+
					"the systemd driver's scope in kubelet's slice for the pod", p.name, p.class, what, path, scope)
			}
		}
		if cg.memory != p.limits.memory {
			t.Errorf("pod %s (runtime class %q): memory limit %d, want %d", p.name, p.class, cg.memory, p.limits.memory)
		}
		if want := p.limits.cpuMilli * cg.cpuPeriod / 1000; cg.cpuQuota != want {
			t.Errorf("pod %s (runtime class %q): CPU quota %d per %d µs, want %d", p.name, p.class, cg.cpuQuota, cg.cpuPeriod, want)
		}
	}

	out, stderr, code, err := n.ctrd.CRI().Exec(ctx, ids["with-class"], "cat", "/class/marker")
	if err != nil || code != 0 || out != "from-class\n" {
		t.Errorf("pod of RuntimeClass mk-kube: cat /class/marker = %q, %q, exit %d, %v; want from-class", out, stderr, code, err)
	}
	out, _, code, err = n.ctrd.CRI().Exec(ctx, ids["plain"], "ls", "/class")
	if err != nil || code == 0 {
		t.Errorf("pod without runtimeClassName: ls /class = %q, exit %d, %v; want no /class", out, code, err)
	}
}

// TestSystemdCgroupV1 checks the harness's hybrid systemd (SystemdOptions.CgroupV1), on which
// TestSystemdCgroupNode rests: a unit's memory and CPU limits reach the v1 controllers inside,
// and Close removes the instance's cgroups in every v1 hierarchy.
func TestSystemdCgroupV1(t *testing.T) {
	testenv.Require(t, "root", harness.SystemdBinary, "unshare", "nsenter")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sd, err := harness.StartSystemdWith(ctx, filepath.Join(t.TempDir(), "systemd"), harness.SystemdOptions{CgroupV1: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	if err := sd.WaitRunning(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := sd.Run(ctx, "systemd-run", "--scope", "--quiet", "--unit=mk-limits.scope", "-p", "MemoryLimit=100M", "-p", "CPUQuota=50%", "--",
		"sh", "-c", "cat /sys/fs/cgroup/memory/system.slice/mk-limits.scope/memory.limit_in_bytes /sys/fs/cgroup/cpu/system.slice/mk-limits.scope/cpu.cfs_quota_us")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out); len(got) != 2 || got[0] != "104857600" || got[1] != "50000" {
		t.Errorf("scope with MemoryLimit=100M CPUQuota=50%%: memory.limit_in_bytes, cpu.cfs_quota_us = %q; want 104857600 and 50000", out)
	}
	v1 := sd.CgroupsV1()
	if len(v1) == 0 {
		t.Fatal("no v1 cgroups for a CgroupV1 instance")
	}
	// systemd makes its slices in the hierarchies whose controllers it uses (memory, cpu,
	// pids, devices) and in its own (name=systemd).
	slices := 0
	for _, dir := range v1 {
		if _, err := os.Stat(filepath.Join(dir, "system.slice")); err == nil {
			slices++
		}
	}
	if slices == 0 {
		t.Errorf("systemd made no system.slice in any of the v1 cgroups %v", v1)
	}
	if err := sd.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range v1 {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("after Close, the instance's v1 cgroup %s is still there (%v)", dir, err)
		}
	}
}
