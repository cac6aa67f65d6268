//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestSystemdCgroupNode: a class pod must get the cgroup and the limits a default pod gets. On
// a node like kubeadm's (systemd cgroup driver for kubelet and containerd's default handler),
// containerd configured by `mountkeeper runtime configure` runs a pod of a mountkeeper class
// exactly like a default pod: both land in kubelet's kubepods.slice hierarchy, each container
// in its pod's slice with the memory and CPU limits the pod asked for; the class pod also gets
// its class mount, the default pod does not.
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
