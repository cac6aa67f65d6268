package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

const sshfsClass = "mountkeeper-demo-sshfs"

// networkFilesystem shows an sshfs class (sshd over loopback): two containers share one host
// mount made in a cgroup scope of its own; killing the plugin's whole cgroup leaves the FUSE
// daemon and the readers alone; the restarted plugin adopts the mount; the FUSE daemon killed
// (SIGKILL) is replaced under the running readers; the last container out unmounts it after
// the grace period. The embedded default cannot know this sshd's port and
// key, so this scenario restarts the plugin on a config of its own.
func networkFilesystem(d *demo) error {
	step("network filesystem: an sshfs class, sshd on 127.0.0.1")
	sshd, err := harness.StartSSHD(d.work)
	if err != nil {
		return err
	}
	defer sshd.Stop()
	if err := os.WriteFile(filepath.Join(sshd.Export(), "motd"), []byte("served by sshd over loopback\n"), 0o644); err != nil {
		return err
	}
	stateDir := filepath.Join(d.work, "state")
	config := filepath.Join(d.work, "sshfs.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`stateDir: %s
unmountGrace: 2s
probeInterval: 500ms
runtimeClasses:
  %s:
    mounts:
      - {type: fuse.sshfs, source: "root@127.0.0.1:%s", destination: /shared, propagation: HostToContainer, options: [%s]}
`, stateDir, sshfsClass, sshd.Export(), strings.Join(sshd.ClientOptions(), ", "))), 0o644); err != nil {
		return err
	}
	cfg, err := configs.Load(config)
	if err != nil {
		return err
	}
	spec := cfg.RuntimeClasses[sshfsClass].NetworkSpecs()[0] // as the plugin will mount it
	defer harness.RemoveMountScope(spec.Key())
	cg, err := harness.NewCgroup2(filepath.Base(d.work) + "-plugin")
	if err != nil {
		return err
	}
	defer cg.Remove()
	d.stopPlugin()
	if err := d.startPluginWith(config, cg.Dir); err != nil {
		return err
	}
	fmt.Printf("  plugin restarted on %s, in cgroup %s\n", config, cg.Dir)

	cri := d.node.CRI()
	var ids []string
	for _, name := range []string{"reader-1", "reader-2"} {
		pod, err := cri.RunPod(d.ctx, harness.PodOptions{Name: name, RuntimeHandler: sshfsClass})
		if err != nil {
			return err
		}
		id, err := cri.CreateContainer(d.ctx, pod, harness.ContainerOptions{Name: name, Args: []string{"sh", "-c",
			"while true; do cat /shared/motd >/dev/null 2>&1 && echo ok >> /tmp/reads || echo FAIL >> /tmp/reads; sleep 0.25; done"}})
		if err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		if err := cri.StartContainer(d.ctx, id); err != nil {
			return err
		}
		ids = append(ids, id)
		out, _, _, _ := cri.Exec(d.ctx, id, "cat", "/shared/motd")
		fmt.Printf("  %s reads /shared/motd: %s", name, out)
	}
	hostPath := netmount.HostPath(stateDir, spec)
	fmt.Printf("  host mounts at %s: %d (shared by both containers)\n", hostPath, mountsAt(hostPath))
	fmt.Printf("  the sshfs daemon runs in cgroup %s\n", harness.ProcessCgroup("sshfs", sshd.Export()))

	step("killing the plugin's whole cgroup (cgroup.kill), as a supervisor restarting the agent would")
	if err := cg.Kill(); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	out, _, _, _ := cri.Exec(d.ctx, ids[0], "sh", "-c", "echo $(grep -c ok /tmp/reads) ok, $(grep -c FAIL /tmp/reads) failed")
	fmt.Printf("  reader-1's reads every 250 ms so far: %s", out)
	if err := d.startPluginWith(config, cg.Dir); err != nil {
		return err
	}
	d.pluginLog("adopted")
	fmt.Printf("  host mounts after the restart: %d\n", mountsAt(hostPath))

	step("killing the sshfs FUSE daemon (SIGKILL), as an OOM kill would")
	pid := harness.ProcessPid("sshfs", sshd.Export())
	if pid == 0 {
		return fmt.Errorf("no sshfs daemon for %s", sshd.Export())
	}
	countReads := func() (ok, failed int, err error) {
		out, _, _, err := cri.Exec(d.ctx, ids[0], "sh", "-c", "echo $(grep -c ok /tmp/reads) $(grep -c FAIL /tmp/reads)")
		if err == nil {
			_, err = fmt.Sscan(out, &ok, &failed)
		}
		if err != nil {
			err = fmt.Errorf("count reader-1's reads: %w", err)
		}
		return ok, failed, err
	}
	okBefore, failedBefore, err := countReads()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	killed := time.Now()
	time.Sleep(300 * time.Millisecond) // the daemon is gone: reads fail from here on
	var recovered time.Duration
	for end := killed.Add(15 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		out, _, _, _ := cri.Exec(d.ctx, ids[0], "cat", "/shared/motd")
		if strings.Contains(out, "served by sshd") {
			recovered = time.Since(killed)
			break
		}
	}
	time.Sleep(time.Second) // a few more reads after the recovery
	okAfter, failedAfter, err := countReads()
	if err != nil {
		return err
	}
	if recovered == 0 {
		return fmt.Errorf("reader-1 still cannot read /shared/motd 15s after the daemon was killed")
	}
	fmt.Printf("  reader-1 reads /shared/motd again %.1fs after the kill, without a restart: %d reads failed meanwhile, %d succeeded since\n",
		recovered.Seconds(), failedAfter-failedBefore, okAfter-okBefore)
	fmt.Printf("  host mounts at %s: %d (the new one on top of the dead one, which was detached)\n", hostPath, mountsAt(hostPath))
	d.pluginLog("recovered")

	step("removing both containers: the mount goes after the 2s grace period")
	for _, id := range ids {
		cri.StopContainer(d.ctx, id)
		cri.RemoveContainer(d.ctx, id)
	}
	fmt.Printf("  right after: %d mount(s)\n", mountsAt(hostPath))
	for end := time.Now().Add(10 * time.Second); mountsAt(hostPath) > 0 && time.Now().Before(end); {
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("  a few seconds later: %d mount(s)\n", mountsAt(hostPath))
	d.pluginLog("unmounted")
	return nil
}

// mountsAt counts the mounts at path (-1 if mountinfo cannot be read).
func mountsAt(path string) int {
	n, err := harness.MountsAt(path)
	if err != nil {
		return -1
	}
	return n
}
