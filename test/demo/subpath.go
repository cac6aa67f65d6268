package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

// subPathRepair shows kubernetes #127602 before and after: kubelet restarts a container that
// mounts a configMap key with subPath, and the configMap's update lands between the runtime's
// CreateContainer and its mount (kubelet's volume reconciler runs beside the pod worker). Without
// mountkeeper runc fails; with it the container starts from a private copy taken at create. The
// kubelet side (volume layout, atomic writer, subPath bind) is imitated under the default
// kubelet root, on a tmpfs private to the demo's mount namespace.
func subPathRepair(d *demo) error {
	root := configs.DefaultKubeletRoot
	cleanup, err := privateTmpfs(root)
	defer cleanup()
	if err != nil {
		return err
	}
	step("subPath and a configMap update during a restart (kubernetes #127602), kubelet imitated under %s", root)
	kubelet := harness.KubeletPod{Root: root, UID: "7d1c2f50-demo"}
	vol := kubelet.VolumeDir("kubernetes.io~configmap", "app-config")
	if _, err := harness.WriteAtomic(vol, map[string]string{"app.conf": "greeting=hello\n"}); err != nil {
		return err
	}
	target, err := kubelet.BindSubPath(vol, "app-config", "web", 0, "app.conf")
	if err != nil {
		return err
	}
	cri := d.node.CRI()
	pod, err := cri.RunPod(d.ctx, harness.PodOptions{Name: "web", UID: kubelet.UID})
	if err != nil {
		return err
	}
	opts := harness.ContainerOptions{Name: "web", Mounts: []harness.Mount{{HostPath: target, ContainerPath: "/etc/app.conf", ReadOnly: true}}}
	greetings := []string{"bonjour", "hola", "ciao"}
	// restart creates the container, lets the configMap change, then starts it.
	restart := func() (string, error) {
		id, err := cri.CreateContainer(d.ctx, pod, opts)
		if err != nil {
			return "", err
		}
		next := greetings[0]
		greetings = greetings[1:]
		old, err := harness.WriteAtomic(vol, map[string]string{"app.conf": "greeting=" + next + "\n"})
		if err != nil {
			return "", err
		}
		if err := os.RemoveAll(old); err != nil {
			return "", err
		}
		fmt.Printf("  CreateContainer answered; then the configMap is updated to greeting=%s and %s removed; then StartContainer\n", next, old[len(vol)+1:])
		if err := cri.StartContainer(d.ctx, id); err != nil {
			cri.RemoveContainer(d.ctx, id)
			return "", err
		}
		return id, nil
	}
	read := func(id string) string {
		out, _, _, _ := cri.Exec(d.ctx, id, "cat", "/etc/app.conf")
		return strings.TrimSpace(out)
	}

	d.stopPlugin()
	_, err = restart()
	if err == nil {
		return errors.New("without mountkeeper the restart should fail, but it started")
	}
	msg := err.Error()
	if i := strings.Index(msg, "error mounting"); i >= 0 {
		msg = msg[i:]
	}
	fmt.Printf("  WITHOUT mountkeeper runc fails, the pod would crash-loop:\n    %s\n", msg)

	if err := d.startPlugin(); err != nil {
		return err
	}
	for range 2 {
		id, err := restart()
		if err != nil {
			return fmt.Errorf("restart with mountkeeper: %w", err)
		}
		fmt.Printf("  WITH mountkeeper it starts and reads what it was created with: %s\n", read(id))
		cri.StopContainer(d.ctx, id)
		cri.RemoveContainer(d.ctx, id)
	}
	d.pluginLog("private copy")
	return cri.RemovePod(d.ctx, pod)
}

// privateTmpfs puts a tmpfs over dir (created if missing) for the demo's imitation; in the
// demo's private mount namespace it hides whatever the host has there from the demo only.
func privateTmpfs(dir string) (func(), error) {
	created := false
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		created = true
	}
	cleanup := func() {
		harness.UnmountAll(dir)
		if created {
			os.Remove(dir)
		}
	}
	return cleanup, harness.MountTmpfs(dir, "private")
}
