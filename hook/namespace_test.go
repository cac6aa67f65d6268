package hook

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/specmod"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// nsFixture is a process in a mount namespace of its own (rslave, as runc makes it), a
// rootfs directory, and shared and private host sources on a tmpfs.
type nsFixture struct {
	pid     int
	rootfs  string
	src     string // a shared tmpfs with private/, slave/, shared/ and file
	outside string
}

func newNSFixture(t *testing.T) *nsFixture {
	t.Helper()
	testenv.Require(t, "root", "unshare")
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := &nsFixture{rootfs: filepath.Join(dir, "rootfs"), src: filepath.Join(dir, "src"), outside: filepath.Join(dir, "outside")}
	for _, d := range []string{f.rootfs + "/etc", f.src, f.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(f.outside, filepath.Join(f.rootfs, "evil")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", f.src, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(f.src, unix.MNT_DETACH) })
	if err := unix.Mount("", f.src, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"private", "slave", "shared"} {
		os.Mkdir(filepath.Join(f.src, d), 0o755)
	}
	os.WriteFile(filepath.Join(f.src, "file"), []byte("from the host"), 0o644)

	cmd := exec.Command(unshare, "--mount", "--propagation", "slave", "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	f.pid = cmd.Process.Pid
	self, _ := os.Readlink("/proc/self/ns/mnt")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if ns, err := os.Readlink("/proc/" + itoa(f.pid) + "/ns/mnt"); err == nil && ns != self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare did not enter a new mount namespace")
		}
	}
	return f
}

func itoa(i int) string { return strconv.Itoa(i) }

// mountsBelow returns the mounts of pid's namespace whose mount point is below dir, by their
// path relative to dir.
func mountsBelow(t *testing.T, pid int, dir string) map[string]mountinfo.Info {
	t.Helper()
	ms, err := testsupport.Mounts(pid, testsupport.Below(dir))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]mountinfo.Info{}
	for _, m := range ms {
		out[strings.TrimPrefix(m.Mountpoint, dir)] = *m
	}
	return out
}

// peerGroup is the "shared:N" group of the host mount at dir.
func peerGroup(t *testing.T, dir string) string {
	t.Helper()
	g, err := testsupport.PeerGroup(dir)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestNamespaceMounter(t *testing.T) {
	f := newNSFixture(t)
	group := peerGroup(t, f.src)
	req := Request{Pid: f.pid, Rootfs: f.rootfs, Mounts: []specmod.Mount{
		{Source: f.src + "/private", Destination: "/vol/private", Propagation: specmod.Private},
		{Source: f.src + "/slave", Destination: "/vol/slave", Propagation: specmod.Slave, ReadOnly: true},
		{Source: f.src + "/shared", Destination: "/vol/shared", Propagation: specmod.Shared, Options: []string{"nosuid", "nodev"}},
		{Source: f.src + "/file", Destination: "/etc/file", Propagation: specmod.Private},
	}}
	if err := (NamespaceMounter{}).MountInContainer(req); err != nil {
		t.Fatalf("MountInContainer: %v", err)
	}
	got := mountsBelow(t, f.pid, f.rootfs)
	want := map[string]struct {
		tags []string // optional fields and options that must be there
		not  []string
	}{
		"/vol/private": {not: []string{"shared:" + group, "master:" + group}},
		"/vol/slave":   {tags: []string{"master:" + group}, not: []string{"shared:" + group}},
		"/vol/shared":  {tags: []string{"shared:" + group}, not: []string{"master:" + group}},
		"/etc/file":    {},
	}
	for dst, w := range want {
		m, ok := got[dst]
		if !ok {
			t.Errorf("%s is not mounted in the namespace; got %v", dst, got)
			continue
		}
		fields := strings.Fields(m.Optional)
		for _, tag := range w.tags {
			if !slices.Contains(fields, tag) {
				t.Errorf("%s lacks %s: %+v", dst, tag, m)
			}
		}
		for _, tag := range w.not {
			if slices.Contains(fields, tag) {
				t.Errorf("%s has %s: %+v", dst, tag, m)
			}
		}
	}
	if opts := got["/vol/slave"].Options; !strings.HasPrefix(opts, "ro,") {
		t.Errorf("/vol/slave is not read-only: %+v", got["/vol/slave"])
	}
	if opts := got["/vol/shared"].Options; !strings.Contains(opts, "nosuid") || !strings.Contains(opts, "nodev") {
		t.Errorf("/vol/shared lacks nosuid,nodev: %+v", got["/vol/shared"])
	}
	if host := mountsBelow(t, os.Getpid(), f.rootfs); len(host) > 0 {
		t.Errorf("mounts leaked into the host's namespace: %v", host)
	}
}

func TestNamespaceMounterAllOrNothing(t *testing.T) {
	f := newNSFixture(t)
	req := Request{Pid: f.pid, Rootfs: f.rootfs, Mounts: []specmod.Mount{
		{Source: f.src + "/private", Destination: "/vol/a", Propagation: specmod.Private},
		{Source: f.src + "/shared", Destination: "/vol/a/nested", Propagation: specmod.Shared},
		{Source: f.src + "/slave", Destination: "/evil/x", Propagation: specmod.Slave},
	}}
	err := (NamespaceMounter{}).MountInContainer(req)
	want := "mount " + f.src + `/slave -> /evil/x (rslave): destination /evil/x: /evil is a symlink to "` + f.outside + `", which leads out of the container's rootfs`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("MountInContainer error\ngot:  %v\nwant: %s", err, want)
	}
	if got := mountsBelow(t, f.pid, f.rootfs); len(got) > 0 {
		t.Errorf("mounts left in the namespace after a failure: %v", got)
	}
	if got := mountsBelow(t, os.Getpid(), f.rootfs); len(got) > 0 {
		t.Errorf("mounts in the host's namespace: %v", got)
	}
	for _, p := range []string{f.rootfs + "/vol", f.src + "/private/nested"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("mount point %s created by the failed hook is still there", p)
		}
	}
	if entries, _ := os.ReadDir(f.outside); len(entries) > 0 {
		t.Errorf("created outside the rootfs: %v", entries)
	}
}

func TestNamespaceMounterErrors(t *testing.T) {
	f := newNSFixture(t)
	m := []specmod.Mount{{Source: f.src + "/private", Destination: "/vol", Propagation: specmod.Private}}
	tests := []struct {
		name string
		req  Request
		err  string
	}{
		{name: "own namespace", req: Request{Pid: os.Getpid(), Rootfs: f.rootfs, Mounts: m},
			err: "is in the hook's own mount namespace, not a container's: refusing to mount there"},
		{name: "no such process", req: Request{Pid: 1 << 30, Rootfs: f.rootfs, Mounts: m},
			err: "the container's process 1073741824 (pid from the OCI state) does not exist"},
		{name: "missing source", req: Request{Pid: f.pid, Rootfs: f.rootfs, Mounts: []specmod.Mount{{Source: f.src + "/gone", Destination: "/vol", Propagation: specmod.Private}}},
			err: "mount " + f.src + "/gone -> /vol (rprivate): source " + f.src + "/gone does not exist on the host"},
		// A container of a class that can write the source's parent swapped the source for a
		// symlink to the host's /etc after the check: the clone must not follow it.
		{name: "source swapped for a symlink", req: Request{Pid: f.pid, Rootfs: f.rootfs, Mounts: []specmod.Mount{{Source: f.src + "/link/private", Destination: "/vol", Propagation: specmod.Private}}},
			err: "mount " + f.src + "/link/private -> /vol (rprivate): source " + f.src + "/link/private: component " + f.src + "/link is a symlink (to \"" + f.src + "\")"},
		{name: "missing rootfs", req: Request{Pid: f.pid, Rootfs: f.rootfs + "-gone", Mounts: m},
			err: "open the container's rootfs in its mount namespace: open " + f.rootfs + "-gone: no such file or directory"},
		{name: "file source onto a directory", req: Request{Pid: f.pid, Rootfs: f.rootfs, Mounts: []specmod.Mount{{Source: f.src + "/file", Destination: "/etc", Propagation: specmod.Private}}},
			err: "destination /etc is a directory in the container, but the source is a file"},
	}
	if err := os.Symlink(f.src, f.src+"/link"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := (NamespaceMounter{}).MountInContainer(tt.req)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error\ngot:  %v\nwant: %s", err, tt.err)
			}
			if got := mountsBelow(t, f.pid, f.rootfs); len(got) > 0 {
				t.Errorf("mounts left: %v", got)
			}
		})
	}

	t.Run("setns failure", func(t *testing.T) {
		notNS, err := os.Open(f.rootfs)
		if err != nil {
			t.Fatal(err)
		}
		defer notNS.Close()
		err = inMountNamespace(notNS, func() error { t.Error("ran outside a mount namespace"); return nil })
		want := "enter the container's mount namespace " + f.rootfs + ": setns(CLONE_NEWNS): invalid argument"
		if err == nil || err.Error() != want {
			t.Fatalf("error\ngot:  %v\nwant: %s", err, want)
		}
	})
}

// TestNoOtherThreadEntersTheNamespace proves the safety argument of inMountNamespace: while
// the hook attaches mounts in the container's namespace, no other goroutine ever runs there,
// also when the runtime starts threads meanwhile, and no thread is left there afterwards.
func TestNoOtherThreadEntersTheNamespace(t *testing.T) {
	f := newNSFixture(t)
	host, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	// Watchers read their own thread's namespace in a loop, on whatever thread they run.
	// Half lock themselves to a thread, so the runtime starts threads while the attach runs.
	stop := make(chan struct{})
	var samples, foreign atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				ns, err := os.Readlink("/proc/thread-self/ns/mnt")
				samples.Add(1)
				if err != nil || ns != host {
					foreign.Add(1)
				}
				runtime.Gosched()
			}
		}()
	}
	for i := range 20 {
		req := Request{Pid: f.pid, Rootfs: f.rootfs, Mounts: []specmod.Mount{
			{Source: f.src + "/private", Destination: "/vol/" + itoa(i), Propagation: specmod.Private},
			{Source: f.src + "/file", Destination: "/etc/file" + itoa(i), Propagation: specmod.Private},
		}}
		if err := (NamespaceMounter{}).MountInContainer(req); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	// Keep watching a while after the last attach: a thread left in the namespace would now
	// run watchers.
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if got := len(mountsBelow(t, f.pid, f.rootfs)); got != 40 {
		t.Errorf("%d mounts in the container's namespace, want 40", got)
	}
	if samples.Load() == 0 {
		t.Fatal("the watchers took no sample")
	}
	if n := foreign.Load(); n > 0 {
		t.Errorf("%d of %d samples ran on a thread outside the host's mount namespace", n, samples.Load())
	}
	// The attaching thread ends with its goroutine, shortly after the attach returned.
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left = left[:0]
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			if ns, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/mnt"); err == nil && ns != host {
				left = append(left, task.Name())
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("threads %v are still in another mount namespace after the attach", left)
	}
	// /proc/self is the main thread: it must never have entered.
	if ns, _ := os.Readlink("/proc/self/ns/mnt"); ns != host {
		t.Errorf("the main thread is in mount namespace %s, not the host's %s", ns, host)
	}
}

// TestOpenNamespaceOfAGoneProcess: whichever namespace the hook opens first (the user
// namespace, for a container with one), a gone process is named as such.
func TestOpenNamespaceOfAGoneProcess(t *testing.T) {
	for _, kind := range []nsKind{mountNamespace, userNamespace} {
		ns, err := openNamespace(1<<30, kind)
		want := "the container's process 1073741824 (pid from the OCI state) does not exist"
		if err == nil || err.Error() != want {
			if ns != nil {
				ns.Close()
			}
			t.Errorf("%s namespace: %v, want %q", kind.name, err, want)
		}
	}
}
