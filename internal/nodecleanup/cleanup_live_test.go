package nodecleanup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/privatens"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestCleanupLive, on real mounts and a real second mount namespace: a state directory as an
// agent leaves it (mounts/ bound onto itself and shared, two "network" mounts below it, one
// with a state file and one without, the subPath copies' tmpfs, the guard key, key locks).
// A process in a namespace of its own (a container, as runc makes it: its own binds, the
// host's mounts detached) holds one network mount and a subPath copy. The cleanup releases
// the other network mount, keeps the held mount, the tmpfs, the guard key and the state
// directory, and says which process holds what; a dry run before it changes nothing; while an agent holds
// the state directory it refuses. Once the holder is gone, a second run removes the rest and
// the state directory, and no mount is left below it.
func TestCleanupLive(t *testing.T) {
	testenv.Require(t, "root", "unshare", "nsenter", "sh")
	if !privatens.Run(t) {
		return
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	mounts := filepath.Join(state, "mounts")
	held, idle := filepath.Join(mounts, "1111111111111111"), filepath.Join(mounts, "2222222222222222")
	copies := filepath.Join(state, "subpath")
	for _, d := range []string{held, idle, copies, filepath.Join(state, "state"), filepath.Join(state, "locks")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mount(t, mounts, mounts, "", unix.MS_BIND)
	mount(t, "", mounts, "", unix.MS_SHARED)
	mount(t, "net-held", held, "tmpfs", 0)
	mount(t, "net-idle", idle, "tmpfs", 0)
	mount(t, "mountkeeper-subpath", copies, "tmpfs", 0)
	writeFile(t, filepath.Join(held, "hello"), "hello")
	writeFile(t, filepath.Join(copies, "secret"), "s3cret")
	writeFile(t, filepath.Join(state, "guard.key"), "0123456789abcdef0123456789abcdef")
	writeFile(t, filepath.Join(state, "state", "1111111111111111.json"), `{"version":1,"type":"fuse.sshfs","source":"root@srv:/x","options":[]}`)
	writeFile(t, filepath.Join(state, "locks", "1111111111111111.lock"), "")
	t.Cleanup(func() { unix.Unmount(held, unix.MNT_DETACH); unix.Unmount(idle, unix.MNT_DETACH) })

	// The "container": its own namespace with its own bind of the held mount, the state
	// directory's mounts detached there (runc leaves the host's mounts behind at pivot_root).
	inside, insideCopy := filepath.Join(dir, "ctr-data"), filepath.Join(dir, "ctr-secret")
	os.MkdirAll(inside, 0o755)
	writeFile(t, insideCopy, "")
	holder := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" "$2" && mount --bind "$3/secret" "$4" && umount -l "$5" && umount -l "$3" && echo ready && exec sleep 600`,
		"sh", held, inside, copies, insideCopy, mounts)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	holder.Stderr = &stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the holder did not start: %q %s", line, stderr.String())
	}
	scoper := &netmount.CgroupScoper{Root: filepath.Join(dir, "no-cgroup"), Parent: "none"} // tmpfs "network" mounts have no scope
	run := func(dry bool) (string, error) {
		var b bytes.Buffer
		err := Run(context.Background(), Options{StateDir: state, DryRun: dry, Scoper: scoper, Out: &b, LockWait: 100 * time.Millisecond,
			Holders: onlyPID{holder.Process.Pid}})
		t.Logf("cleanup (dry run %v):\n%s-> %v", dry, b.String(), err)
		return b.String(), err
	}

	t.Run("refused while an agent holds the state directory", func(t *testing.T) {
		lock, err := netmount.LockStateDir(state, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Close()
		if _, err := run(false); err == nil || !strings.Contains(err.Error(), "stop the agent first") {
			t.Errorf("cleanup while an agent runs: %v, want a refusal naming it", err)
		}
		if !isMount(t, idle) || !isMount(t, copies) {
			t.Error("the refused cleanup changed the mounts")
		}
	})

	t.Run("a dry run changes nothing", func(t *testing.T) {
		text, err := run(true)
		var inUse *InUseError
		if !errors.As(err, &inUse) || !strings.Contains(text, "would: release") {
			t.Errorf("dry run: %v, %q", err, text)
		}
		if !isMount(t, idle) || !exists(filepath.Join(state, "guard.key")) {
			t.Error("the dry run changed the node")
		}
	})

	t.Run("what a container uses is kept and named; the rest goes", func(t *testing.T) {
		_, err := run(false)
		var inUse *InUseError
		if !errors.As(err, &inUse) || len(inUse.Kept) != 2 || inUse.Kept[0].Path != held || inUse.Kept[1].Path != copies {
			t.Fatalf("cleanup: %v, want the held mount and the subPath tmpfs kept", err)
		}
		for i, at := range []string{inside, insideCopy} {
			h := inUse.Kept[i].Holders
			if len(h) != 1 || h[0].PID != holder.Process.Pid || h[0].MountPoint != at || h[0].Comm != "sleep" {
				t.Errorf("holders of %s: %+v, want pid %d (sleep) at %s", inUse.Kept[i].Path, h, holder.Process.Pid, at)
			}
		}
		if !strings.Contains(err.Error(), "pid "+strconv.Itoa(holder.Process.Pid)) || !strings.Contains(err.Error(), "fuse.sshfs root@srv:/x") {
			t.Errorf("the error does not name the holder and the mount: %v", err)
		}
		if !isMount(t, held) || readFile(t, filepath.Join(inside, "hello"), holder.Process.Pid) != "hello" {
			t.Error("the mount a container uses was released")
		}
		if isMount(t, idle) || !isMount(t, copies) || readFile(t, insideCopy, holder.Process.Pid) != "s3cret" {
			t.Error("want the idle network mount released and the subPath tmpfs kept")
		}
		// The key stays while a container keeps the cleanup from finishing (it goes with the
		// state directory in the run that finishes, below).
		if !exists(filepath.Join(state, "guard.key")) || !exists(state) {
			t.Error("want the guard key and the state directory kept")
		}
	})

	t.Run("once the container is gone, nothing is left", func(t *testing.T) {
		holder.Process.Kill()
		holder.Wait()
		if _, err := run(false); err != nil {
			t.Fatal(err)
		}
		if exists(state) {
			t.Errorf("%s is still there", state)
		}
		if infos, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(state)); len(infos) != 0 {
			t.Errorf("mounts left below the state directory: %v", infos)
		}
	})
}

// onlyPID is ProcHolders reduced to one process: under `make unit` other packages' tests run
// in namespaces copied from this one, which hold copies of these mounts as well (and would
// rightly be named).
type onlyPID struct{ pid int }

func (o onlyPID) Holders(devices []string) (map[string][]Holder, error) {
	all, err := ProcHolders{}.Holders(devices)
	for dev, hs := range all {
		all[dev] = slices.DeleteFunc(hs, func(h Holder) bool { return h.PID != o.pid })
		if len(all[dev]) == 0 {
			delete(all, dev)
		}
	}
	return all, err
}

func mount(t *testing.T, src, dst, fstype string, flags uintptr) {
	t.Helper()
	if err := unix.Mount(src, dst, fstype, flags, ""); err != nil {
		t.Fatalf("mount %s on %s: %v", src, dst, err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// readFile reads path in the mount namespace of pid.
func readFile(t *testing.T, path string, pid int) string {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-m", "cat", path).Output()
	if err != nil {
		t.Errorf("read %s in pid %d's namespace: %v", path, pid, err)
	}
	return string(out)
}

func isMount(t *testing.T, path string) bool {
	t.Helper()
	ok, err := mountinfo.Mounted(path)
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		t.Fatal(err)
	}
	return ok
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
