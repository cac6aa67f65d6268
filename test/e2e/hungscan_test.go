//go:build e2e

package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestLiveSubPathHungMountElsewhere: a process on the node holds a file (its stdin) and its
// working directory on an sshfs mount whose FUSE daemon is stopped (SIGSTOP: every request to
// it waits, as on a hung server; the mount has attr_timeout=0, so a stat of the file would
// wait too). On containerd over NRI, with that hang in place:
//   - a live subPath update is applied (the old version retired and the scan kicked);
//   - StopContainer and RemoveContainer of an unrelated container return (hang guard), and
//     the plugin is never dropped by the runtime (no reconnection in its log);
//   - the next update is applied too, and the versions replaced are freed: the scan of
//     /proc finished although a process holds that mount;
//   - a new container with the same live subPaths is created and reads the newest content.
func TestLiveSubPathHungMountElsewhere(t *testing.T) {
	testenv.Require(t, sshfsNeeds...)
	s := startLiveSubPath(t, harness.KindContainerd, false)
	cri := s.n.rt.CRI()
	other := s.n.mustRun("", "other", nil)
	stopFUSEUnderHolder(t, harness.WorkDir(t, "mk-hungscan-"))

	s.write(2)
	s.waitRead(2)
	hangGuard(t, "StopContainer of an unrelated container", func() error { return cri.StopContainer(s.n.ctx, other) })
	hangGuard(t, "RemoveContainer of an unrelated container", func() error { return cri.RemoveContainer(s.n.ctx, other) })
	s.write(3)
	s.waitRead(3)
	want := []string{"0.v2", "1.v2"} // the copies of subPath 0 and 1 at version 2
	left := s.versionsLeft()
	for deadline := time.Now().Add(30 * time.Second); !slices.Equal(left, want) && time.Now().Before(deadline); left = s.versionsLeft() {
		time.Sleep(50 * time.Millisecond) // a hang guard: the scan runs every 2 s
	}
	if !slices.Equal(left, want) {
		t.Errorf("versions left: %v, want %v (the scan is stuck on the stopped FUSE mount)", left, want)
	}
	if log := s.n.plugin.Log(); strings.Contains(log, "NRI connection on") {
		t.Errorf("the runtime dropped the plugin while the FUSE daemon was stopped; plugin log:\n%s", log)
	}

	mounts := []harness.Mount{}
	for i, m := range []struct{ subPath, ctrPath string }{{"app.conf", "/etc/app.conf"}, {"conf.d", "/etc/conf.d"}} {
		target, err := s.pod.BindSubPath(s.cfgDir, "cfg", "app2", i, m.subPath)
		if err != nil {
			t.Fatal(err)
		}
		mounts = append(mounts, harness.Mount{HostPath: target, ContainerPath: m.ctrPath, ReadOnly: true})
	}
	var id string
	hangGuard(t, "a new container with live subPaths", func() error {
		podID, err := cri.RunPod(s.n.ctx, harness.PodOptions{Name: "web2", UID: s.pod.UID})
		if err == nil {
			id, err = cri.CreateContainer(s.n.ctx, podID, harness.ContainerOptions{Name: "app2", Mounts: mounts})
		}
		if err == nil {
			err = cri.StartContainer(s.n.ctx, id)
		}
		return err
	})
	if out, _ := s.n.sh(id, liveRead); out != liveWant(3) {
		t.Errorf("the new container reads %q, want %q", out, liveWant(3))
	}
}
