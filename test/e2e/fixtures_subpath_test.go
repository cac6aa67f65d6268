//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	subpathcopies "github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

// subPathMount is one subPath volume mount of the test container, as kubelet sets it up.
type subPathMount struct {
	plugin, volume, subPath, ctrPath string
	tmpfs                            bool   // the volume is a tmpfs of its own (secrets)
	v1, v2                           string // what the container reads before and after the update
}

func testSubPathRepair(t *testing.T, kind harness.RuntimeKind) {
	n := newNode(t, kind, nil, subPathConfig)
	pod := harness.KubeletPod{Root: filepath.Join(n.src(), "kubelet"), UID: "0b5e6f3c-uid"}
	mounts := []subPathMount{
		{"kubernetes.io~configmap", "cfg", "app.conf", "/etc/app.conf", false, "cfg-v1", "cfg-v2"},
		{"kubernetes.io~secret", "sec", "token", "/var/run/token", true, "token-v1", "token-v2"},
		{"kubernetes.io~projected", "proj", "conf.d", "/etc/conf.d", false, "ini-v1", "ini-v2"},
		{"kubernetes.io~projected", "proj", "conf.d/app.ini", "/etc/app.ini", false, "ini-v1", "ini-v2"},
	}
	payload := func(version int) map[string]map[string]string {
		pick := func(m subPathMount) string { return map[int]string{1: m.v1, 2: m.v2}[version] }
		return map[string]map[string]string{
			"cfg":  {"app.conf": pick(mounts[0]), "other": "x"},
			"sec":  {"token": pick(mounts[1])},
			"proj": {"conf.d/app.ini": pick(mounts[2]), "top": "x"},
		}
	}
	volDirs := map[string]string{}
	for _, m := range mounts {
		dir := pod.VolumeDir(m.plugin, m.volume)
		if _, done := volDirs[m.volume]; done {
			continue
		}
		volDirs[m.volume] = dir
		if m.tmpfs {
			if err := harness.MountTmpfs(dir, "private"); err != nil {
				t.Fatal(err)
			}
		}
	}
	write := func(version int) []string {
		var olds []string
		for vol, files := range payload(version) {
			old, err := harness.WriteAtomic(volDirs[vol], files)
			if err != nil {
				t.Fatal(err)
			}
			if old != "" {
				olds = append(olds, old)
			}
		}
		return olds
	}
	write(1)
	var criMounts []harness.Mount
	for i, m := range mounts {
		target, err := pod.BindSubPath(volDirs[m.volume], m.volume, "app", i, m.subPath)
		if err != nil {
			t.Fatal(err)
		}
		criMounts = append(criMounts, harness.Mount{HostPath: target, ContainerPath: m.ctrPath, ReadOnly: true})
	}
	readAll := "cat /etc/app.conf /var/run/token /etc/conf.d/app.ini /etc/app.ini | tr '\\n' ' '"
	want := func(version int) string {
		var parts []string
		for _, m := range mounts {
			parts = append(parts, map[int]string{1: m.v1, 2: m.v2}[version])
		}
		return strings.Join(parts, "")
	}

	cri := n.rt.CRI()
	podID, err := cri.RunPod(n.ctx, harness.PodOptions{Name: "web", UID: pod.UID})
	if err != nil {
		t.Fatal(err)
	}
	// run creates and starts the container as kubelet does on a restart; runc mounts at start.
	// A container that fails is removed, as kubelet does before its next attempt.
	run := func() (string, error) {
		id, err := cri.CreateContainer(n.ctx, podID, harness.ContainerOptions{Name: "app", Mounts: criMounts})
		if err != nil {
			return "", err
		}
		if err := cri.StartContainer(n.ctx, id); err != nil {
			cri.RemoveContainer(n.ctx, id)
			return "", err
		}
		return id, nil
	}
	first, err := run()
	if err != nil {
		t.Fatalf("first start: %v", err)
	}
	if out, _ := n.sh(first, readAll); strings.ReplaceAll(out, " ", "") != want(1) {
		t.Fatalf("first start reads %q, want %q", out, want(1))
	}
	if err := cri.StopContainer(n.ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := cri.RemoveContainer(n.ctx, first); err != nil {
		t.Fatal(err)
	}

	for _, old := range write(2) {
		if err := os.RemoveAll(old); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("without mountkeeper runc fails with ENOENT", func(t *testing.T) {
		n.plugin.Stop()
		_, err := run()
		if err == nil || !strings.Contains(err.Error(), "no such file or directory") {
			t.Fatalf("restart without the plugin: %v, want runc's ENOENT (the scenario is not reproduced)", err)
		}
		t.Logf("without the plugin: %v", err)
	})

	t.Run("with mountkeeper the container starts with the new content", func(t *testing.T) {
		n.startPlugin()
		id, err := run()
		if err != nil {
			t.Fatalf("restart with the plugin: %v", err)
		}
		if out, _ := n.sh(id, readAll); strings.ReplaceAll(out, " ", "") != want(2) {
			t.Errorf("restarted container reads %q, want %q", out, want(2))
		}
		for _, vol := range []string{"cfg", "sec", "proj"} {
			if !strings.Contains(n.plugin.Log(), "volume="+vol) {
				t.Errorf("no repair logged for volume %s; log:\n%s", vol, n.plugin.Log())
			}
		}
	})

	// Never worse than kubelet: the bind is not repaired from outside the volume; it
	// is left stale, the container is created as kubelet alone would create it, and runc fails
	// it at start with its own ENOENT, as it does without mountkeeper.
	t.Run("a stale emptyDir subPath that became a symlink out of the volume is not followed", func(t *testing.T) {
		scratch := pod.VolumeDir("kubernetes.io~empty-dir", "scratch")
		if err := os.MkdirAll(scratch, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(scratch, "data.txt"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		target, err := pod.BindSubPath(scratch, "scratch", "evil", 0, "data.txt")
		if err != nil {
			t.Fatal(err)
		}
		outside := filepath.Join(n.dir, "host-secret")
		if err := os.WriteFile(outside, []byte("host-only"), 0o600); err != nil {
			t.Fatal(err)
		}
		// A container that can write the emptyDir swaps the file for a symlink to the host.
		os.Remove(filepath.Join(scratch, "data.txt"))
		if err := os.Symlink(outside, filepath.Join(scratch, "data.txt")); err != nil {
			t.Fatal(err)
		}
		// CRI-O runs runc create at CreateContainer, containerd at StartContainer: runc's
		// ENOENT comes at one or the other, never mountkeeper's refusal.
		id, err := cri.CreateContainer(n.ctx, podID, harness.ContainerOptions{Name: "evil",
			Mounts: []harness.Mount{{HostPath: target, ContainerPath: "/data.txt"}}})
		if err == nil {
			err = cri.StartContainer(n.ctx, id)
		}
		if err == nil || !strings.Contains(err.Error(), "no such file or directory") || strings.Contains(err.Error(), "mountkeeper") {
			t.Errorf("a container whose stale subPath points out of its volume: %v, want runc's ENOENT on kubelet's stale bind, not a refusal", err)
		}
		var line string
		for _, l := range strings.Split(n.plugin.Log(), "\n") {
			if strings.Contains(l, "keeps kubelet's bind") && strings.Contains(l, "volume scratch") {
				line = l
			}
		}
		for _, s := range []string{"data.txt", "leads out of the volume", "reason=error"} {
			if !strings.Contains(line, s) {
				t.Errorf("the fallback's log line lacks %q: %q", s, line)
			}
		}
		var st, out unix.Stat_t
		if unix.Stat(target, &st) == nil && unix.Stat(outside, &out) == nil && st.Ino == out.Ino && st.Dev == out.Dev {
			t.Errorf("the subPath target now holds %s", outside)
		}
	})
}

func testSubPathWindow(t *testing.T, kind harness.RuntimeKind) {
	n := newNode(t, kind, nil, subPathConfig)
	pod := harness.KubeletPod{Root: filepath.Join(n.src(), "kubelet"), UID: "5a1d0c0e-uid"}
	cfgDir := pod.VolumeDir("kubernetes.io~configmap", "cfg")
	secDir := pod.VolumeDir("kubernetes.io~secret", "sec")
	if err := harness.MountTmpfs(secDir, "private"); err != nil {
		t.Fatal(err)
	}
	write := func(version string, removeOld bool) {
		t.Helper()
		for dir, files := range map[string]map[string]string{
			cfgDir: {"app.conf": "app-" + version, "conf.d/a.ini": "a-" + version},
			secDir: {"token": "token-" + version},
		} {
			old, err := harness.WriteAtomic(dir, files)
			if err != nil {
				t.Fatal(err)
			}
			// A secret is 0640 and owned by the pod's fsGroup, as kubelet writes it.
			if dir == secDir {
				tok := filepath.Join(dir, "..data", "token")
				if err := os.Chmod(tok, 0o640); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(tok, 0, 2000); err != nil {
					t.Fatal(err)
				}
			}
			if removeOld && old != "" {
				if err := os.RemoveAll(old); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	write("v1", false)
	var mounts []harness.Mount
	for i, m := range []struct{ dir, volume, subPath, ctrPath string }{
		{cfgDir, "cfg", "app.conf", "/etc/app.conf"},
		{cfgDir, "cfg", "conf.d", "/etc/conf.d"},
		{secDir, "sec", "token", "/var/run/token"},
	} {
		target, err := pod.BindSubPath(m.dir, m.volume, "app", i, m.subPath)
		if err != nil {
			t.Fatal(err)
		}
		mounts = append(mounts, harness.Mount{HostPath: target, ContainerPath: m.ctrPath, ReadOnly: true})
	}
	cri := n.rt.CRI()
	podID, err := cri.RunPod(n.ctx, harness.PodOptions{Name: "web", UID: pod.UID})
	if err != nil {
		t.Fatal(err)
	}
	// raceStart creates the container, lets the volumes change, then starts it.
	version := 1
	raceStart := func() (string, string, error) {
		id, err := cri.CreateContainer(n.ctx, podID, harness.ContainerOptions{Name: "app", Mounts: mounts})
		if err != nil {
			return "", "", err
		}
		created := fmt.Sprintf("v%d", version)
		version++
		write(fmt.Sprintf("v%d", version), true)
		if err := cri.StartContainer(n.ctx, id); err != nil {
			cri.RemoveContainer(n.ctx, id)
			return "", created, err
		}
		return id, created, nil
	}

	// containerd runs `runc create`, which makes the mounts, in StartContainer: the window is
	// between the two calls. CRI-O runs it in CreateContainer, right after the NRI plugins
	// answered: an update after CreateContainer can no longer break the container, and the
	// window is inside CreateContainer (TestSubPathRepair covers a bind gone stale before it).
	mountsAtCreate := kind == harness.KindCRIO
	t.Run("without mountkeeper the update between create and start fails runc", func(t *testing.T) {
		n.plugin.Stop()
		defer n.startPlugin()
		id, created, err := raceStart()
		if mountsAtCreate {
			if err != nil {
				t.Fatalf("%s mounts at CreateContainer, yet the start after the update failed: %v", kind, err)
			}
			defer func() { cri.StopContainer(n.ctx, id); cri.RemoveContainer(n.ctx, id) }()
			out, _ := n.sh(id, "cat /etc/app.conf")
			if out != "app-"+created {
				t.Errorf("container reads %q, want %q (what it was created with)", out, "app-"+created)
			}
			t.Logf("%s made the mounts at CreateContainer: the update before StartContainer did not matter", kind)
			return
		}
		if err == nil || !strings.Contains(err.Error(), "no such file or directory") {
			t.Fatalf("start after the update: %v, want runc's ENOENT (the race is not reproduced)", err)
		}
		t.Logf("without the plugin: %v", err)
	})

	t.Run("with mountkeeper the container starts with what it was created with", func(t *testing.T) {
		for range 3 { // kubelet's bind goes stale at the first update: both cases, and again
			id, created, err := raceStart()
			if err != nil {
				t.Fatalf("start after the update: %v", err)
			}
			out, _ := n.sh(id, "cat /etc/app.conf /etc/conf.d/a.ini /var/run/token; stat -c ' %a %u:%g' /var/run/token")
			want := fmt.Sprintf("app-%[1]sa-%[1]stoken-%[1]s 640 0:2000", created)
			if got := strings.Join(strings.Fields(out), ""); got != strings.ReplaceAll(want, " ", "") {
				t.Errorf("container reads %q, want %q", out, want)
			}
			copies := filepath.Join(n.src(), "state", "subpath", pod.UID, id)
			if _, err := os.Stat(copies); err != nil {
				t.Errorf("no private copies at %s: %v", copies, err)
			}
			// The runtime applied the plugin's replacement of kubelet's bind: the mount is the
			// container's directory on the pod's copy tmpfs, not the file in the volume.
			mi, _ := n.sh(id, "cat /proc/self/mountinfo")
			for _, dst := range []string{"/etc/app.conf", "/etc/conf.d", "/var/run/token"} {
				m := mountIn(t, mi, dst)
				if m == nil || !strings.HasPrefix(m.Root, "/"+id+"/") || m.Source != subpathcopies.PodTmpfsSource {
					t.Errorf("%s is not mounted from the private copy in %s:\n%s", dst, copies, mountLine(m))
				}
			}
			if err := cri.StopContainer(n.ctx, id); err != nil {
				t.Fatal(err)
			}
			if err := cri.RemoveContainer(n.ctx, id); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(copies); !os.IsNotExist(err) {
				t.Errorf("RemoveContainer left the copies at %s: %v", copies, err)
			}
		}
		if !strings.Contains(n.plugin.Log(), "bound from a private copy") {
			t.Errorf("no copy logged; log:\n%s", n.plugin.Log())
		}
	})
}
