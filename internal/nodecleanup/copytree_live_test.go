package nodecleanup

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/guard"
	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
	subpathcopies "github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/test/privatens"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestCleanupLiveSubPathLayers, on real mounts in a private mount namespace: the agent was
// removed before the pods of a live-subPath class, so the copy tmpfs still carries the mount
// stack of each live copy, as the live update code makes it (each copy path P a bind of itself
// in a peer group of its own, the versions P.v<N> cloned private and attached at P: on top of
// the base, later beneath the layer on top). Three copies: a file settled on its second
// version, a directory caught between an attach beneath and the detach of the layer above (an
// agent killed mid-update: two layers), and a directory whose top layer a process of this
// namespace still has as its working directory (not a container: nothing another namespace
// holds). One run of the cleanup takes all of it down, lazily detaching (and saying so) only
// the busy layer, and removes the guard key and the state directory: no second run is needed.
// The copies are on their pod's own tmpfs, mounted on the copy tmpfs as the agent mounts it,
// and a copy removed from it is still open through a descriptor in flight on a unix socket:
// the pod's tmpfs is taken down after the live copies on it and before the copy tmpfs, lazily.
func TestCleanupLiveSubPathLayers(t *testing.T) {
	testenv.Require(t, "sh")
	state, copies, ok := copyState(t)
	if !ok {
		return
	}

	pod := filepath.Join(copies, "pod-uid")
	mkdirs(t, pod)
	mount(t, subpathcopies.PodTmpfsSource, pod, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV)
	mount(t, "", pod, "", unix.MS_SHARED)
	pinRemoved(t, filepath.Join(pod, "removed-copy"))
	ctr := filepath.Join(pod, "ctr-id", "cfg")
	settled := liveCopy(t, filepath.Join(ctr, "0"), false, 2, true)
	midUpdate := liveCopy(t, filepath.Join(ctr, "1"), true, 2, false)
	busy := liveCopy(t, filepath.Join(ctr, "2"), true, 1, true)
	for _, p := range []string{settled, midUpdate, busy} {
		t.Logf("%s: %d mounts stacked", p, stacked(t, p))
	}
	if n := stacked(t, midUpdate); n != 3 {
		t.Fatalf("the mid-update copy has %d mounts, want base + 2 layers", n)
	}

	// A process with its working directory in the busy copy's top layer: a plain unmount of
	// that layer fails with EBUSY.
	holder := exec.Command("sh", "-c", `cd "$1" && echo ready && exec sleep 600`, "sh", busy)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the holder did not start: %q", line)
	}

	var b bytes.Buffer
	err = Run(context.Background(), testOptions(t, state, &b))
	t.Logf("cleanup:\n%s-> %v", b.String(), err)
	if err != nil {
		t.Fatalf("one run of the cleanup: %v, want everything removed", err)
	}
	if infos, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(state)); len(infos) != 0 {
		t.Errorf("mounts left below the state directory: %d, the first at %s", len(infos), infos[0].Mountpoint)
	}
	if exists(state) {
		t.Errorf("%s is still there", state)
	}
	if !strings.Contains(b.String(), "lazily detached") || !strings.Contains(b.String(), busy) {
		t.Errorf("the output does not say that the busy layer at %s was lazily detached", busy)
	}
	if !strings.Contains(b.String(), "lazily detached the pod's subPath copies' tmpfs at "+pod) {
		t.Errorf("the output does not say that the pod's tmpfs at %s, whose removed copy is still open, was lazily detached", pod)
	}
	// The holder still reads the version it had: a lazy detach takes nothing from under it.
	if got, err := os.ReadFile(fmt.Sprintf("/proc/%d/cwd/content", holder.Process.Pid)); err != nil || string(got) != "v1" {
		t.Errorf("the holder's working directory holds %q (%v), want v1", got, err)
	}
}

// pinRemoved writes a file at path, removes it and keeps it open through a descriptor in
// flight on a unix socket pair (no process's fd table holds it) until the test ends.
func pinRemoved(t *testing.T, path string) {
	t.Helper()
	writeFile(t, path, "secret")
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(pair[0]); unix.Close(pair[1]) })
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Sendmsg(pair[0], []byte{0}, unix.UnixRights(fd), nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// copyState makes, in a private mount namespace, a state directory with a guard key and the
// copy tmpfs as subpath.PrepareCopyDir makes it (a tmpfs of its own, shared), on a kernel
// that can make live copies; ok false: the test ran in a namespace of its own (privatens.Run).
func copyState(t *testing.T) (state, copies string, ok bool) {
	t.Helper()
	testenv.Require(t, "root")
	if err := mounttable.CanMountBeneath(); err != nil {
		testenv.Skip(t, "live subPath copies need MOVE_MOUNT_BENEATH: %v", err)
	}
	if !privatens.Run(t) {
		return "", "", false
	}
	state = filepath.Join(t.TempDir(), "state")
	copies = filepath.Join(state, "subpath")
	mkdirs(t, copies)
	writeFile(t, filepath.Join(state, guard.KeyFile), "0123456789abcdef0123456789abcdef")
	mount(t, "mountkeeper-subpath", copies, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV)
	mount(t, "", copies, "", unix.MS_SHARED)
	t.Cleanup(func() { detachAll(state) })
	return state, copies, true
}

// testOptions are the options of a cleanup of state in a test: no holders (other tests'
// namespaces hold copies of these mounts under make unit), no cgroup scopes, output to out.
func testOptions(t *testing.T, state string, out io.Writer) Options {
	return Options{StateDir: state, Out: out, LockWait: 100 * time.Millisecond, Holders: onlyPID{-1},
		Scoper: &netmount.CgroupScoper{Root: filepath.Join(t.TempDir(), "no-cgroup"), Parent: "none"}}
}

// liveCopy makes path below the copy tmpfs a live copy as the live update code leaves it, with
// versions P.v1..P.v<versions> (content "v<N>", a file "content" in a directory): the base (a
// bind of itself, private, attached, then shared), the first version on top of it, each later
// one beneath the layer on top, which is then detached unless midUpdate is set for the last.
// It returns path.
func liveCopy(t *testing.T, path string, isDir bool, versions int, settle bool) string {
	t.Helper()
	mkdirs(t, filepath.Dir(path))
	put := func(p, content string) {
		if isDir {
			mkdirs(t, p)
			writeFile(t, filepath.Join(p, "content"), content)
		} else {
			writeFile(t, p, content)
		}
	}
	put(path, "v0")
	base := privateClone(t, path)
	moveMount(t, base, path, 0)
	if err := unix.MountSetattr(base, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Propagation: unix.MS_SHARED}); err != nil {
		t.Fatalf("make the base at %s shared: %v", path, err)
	}
	unix.Close(base)
	for v := 1; v <= versions; v++ {
		version := fmt.Sprintf("%s.v%d", path, v)
		put(version, fmt.Sprintf("v%d", v))
		layer := privateClone(t, version)
		if v == 1 {
			moveMount(t, layer, path, 0)
			unix.Close(layer)
			continue
		}
		top, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			t.Fatal(err)
		}
		moveMount(t, layer, path, mountBeneath)
		unix.Close(layer)
		if v < versions || settle {
			if err := unix.Unmount(fmt.Sprintf("/proc/self/fd/%d", top), unix.MNT_DETACH); err != nil {
				t.Fatalf("detach the layer above version %d at %s: %v", v, path, err)
			}
		}
		unix.Close(top)
	}
	return path
}

// mountBeneath is MOVE_MOUNT_BENEATH (Linux >= 6.5), not in x/sys/unix yet.
const mountBeneath = 0x200

func privateClone(t *testing.T, path string) int {
	t.Helper()
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		t.Fatalf("open_tree %s: %v", path, err)
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Propagation: unix.MS_PRIVATE}); err != nil {
		t.Fatalf("make the clone of %s private: %v", path, err)
	}
	return fd
}

func moveMount(t *testing.T, fd int, to string, flags int) {
	t.Helper()
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, to, unix.MOVE_MOUNT_F_EMPTY_PATH|flags); err != nil {
		t.Fatalf("move_mount to %s (flags %#x): %v", to, flags, err)
	}
}

// stacked counts the mounts at path.
func stacked(t *testing.T, path string) int {
	t.Helper()
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) { return m.Mountpoint != path, false })
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}

// detachAll lazily detaches every mount at or below dir, deepest first, so that a failed test
// leaves none (its namespace would drop them too; t.TempDir's removal needs them gone).
func detachAll(dir string) {
	for range 16 {
		ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
		if len(ms) == 0 {
			return
		}
		for i := len(ms) - 1; i >= 0; i-- {
			unix.Unmount(ms[i].Mountpoint, unix.MNT_DETACH)
		}
	}
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCleanupLiveSubPathRetry: when a mount of the copy tree cannot be unmounted (here the
// node refuses the base of one copy once, with EPERM, as a locked mount would), the cleanup
// names it and the cause, touches nothing below it (no lazy detach of the tmpfs, which would
// take the failed mount along unseen), keeps the guard key, and a second run finishes.
func TestCleanupLiveSubPathRetry(t *testing.T) {
	state, copies, ok := copyState(t)
	if !ok {
		return
	}
	key := filepath.Join(state, guard.KeyFile)
	stuck := liveCopy(t, filepath.Join(copies, "pod", "ctr", "cfg", "0"), true, 1, true)
	liveCopy(t, filepath.Join(copies, "pod", "ctr", "cfg", "1"), false, 2, true)

	var b bytes.Buffer
	o := testOptions(t, state, &b)
	err := run(context.Background(), o, &refuseOnce{liveNode: liveNode{}, path: stuck})
	t.Logf("first run:\n%s-> %v", b.String(), err)
	if err == nil || !strings.Contains(err.Error(), stuck) || !strings.Contains(err.Error(), "operation not permitted") {
		t.Fatalf("first run: %v, want an error naming %s and the cause", err, stuck)
	}
	if stacked(t, stuck) != 1 || stacked(t, copies) != 1 || !exists(key) || strings.Contains(b.String(), "lazily") {
		t.Errorf("after the failure: %d mounts at %s (want its base), %d at %s (want the tmpfs), guard key there %v (want it), output %q",
			stacked(t, stuck), stuck, stacked(t, copies), copies, exists(key), b.String())
	}
	b.Reset()
	err = Run(context.Background(), o)
	t.Logf("second run:\n%s-> %v", b.String(), err)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if infos, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(state)); len(infos) != 0 || exists(state) {
		t.Errorf("after the second run: %d mounts below %s, state directory there %v", len(infos), state, exists(state))
	}
}

// refuseOnce is the live node, but the unmount of the base at path (the mount at path that
// is on the tmpfs) fails once with EPERM.
type refuseOnce struct {
	liveNode
	path  string
	fired bool
}

func (r *refuseOnce) unmountCopy(c copyMount) (bool, error) {
	if c.Path == r.path && !r.fired && stackedNow(c.Path) == 1 {
		r.fired = true
		return false, fmt.Errorf("unmount %s: %w", c.describe(), unix.EPERM)
	}
	return r.liveNode.unmountCopy(c)
}

func stackedNow(path string) int {
	ms, _ := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) { return m.Mountpoint != path, false })
	return len(ms)
}
