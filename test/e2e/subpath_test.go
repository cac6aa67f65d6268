//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

const subPathConfig = `
kubeletRoot: SRC/kubelet
`

// subPathMount is one subPath volume mount of the test container, as kubelet sets it up.
type subPathMount struct {
	plugin, volume, subPath, ctrPath string
	tmpfs                            bool   // the volume is a tmpfs of its own (secrets)
	v1, v2                           string // what the container reads before and after the update
}

// TestSubPathRepair reproduces kubernetes #68211 on real containerd + runc: a container whose
// subPath mounts point into configMap, secret and projected volumes is restarted after the
// volumes were updated the atomic-writer way. Without mountkeeper runc fails with ENOENT;
// with it the container starts and reads the new content.
func TestSubPathRepair(t *testing.T) {
	n := newNode(t, nil, subPathConfig)
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

	cri := n.ctrd.CRI()
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
		_, err = cri.CreateContainer(n.ctx, podID, harness.ContainerOptions{Name: "evil",
			Mounts: []harness.Mount{{HostPath: target, ContainerPath: "/data.txt"}}})
		if err == nil {
			t.Fatal("container created from a subPath that now points out of its volume")
		}
		for _, s := range []string{"mountkeeper", "scratch", "data.txt"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error lacks %q: %v", s, err)
			}
		}
		var st, out unix.Stat_t
		if unix.Stat(target, &st) == nil && unix.Stat(outside, &out) == nil && st.Ino == out.Ino && st.Dev == out.Dev {
			t.Errorf("the subPath target now holds %s", outside)
		}
	})
}
