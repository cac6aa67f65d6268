package netmount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

type fakeProbe map[string]string // path -> content; present means it exists

func (f fakeProbe) exists(path string) bool { _, ok := f[path]; return ok }
func (f fakeProbe) readFile(path string) ([]byte, error) {
	if c, ok := f[path]; ok {
		return []byte(c), nil
	}
	return nil, os.ErrNotExist
}

const (
	hybridMountinfo = `24 1 0:22 / / rw - ext4 /dev/root rw
30 24 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
`
	unifiedMountinfo = `24 1 0:22 / / rw - ext4 /dev/root rw
30 24 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`
	elsewhereMountinfo = `24 1 0:22 / / rw - ext4 /dev/root rw
40 24 0:29 / /run/cg2 rw - cgroup2 none rw
`
	v1OnlyMountinfo = `24 1 0:22 / / rw - ext4 /dev/root rw
32 24 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
`
)

func TestDetectScoper(t *testing.T) {
	tests := []struct {
		name     string
		probe    fakeProbe
		wantName string
		wantRoot string // for cgroup
		wantErr  string
	}{
		{name: "systemd as PID 1", probe: fakeProbe{"/run/systemd/system": "", "/proc/1/comm": "systemd\n", "/proc/self/mountinfo": hybridMountinfo},
			wantName: "systemd"},
		{name: "systemd dir but another PID 1", probe: fakeProbe{"/run/systemd/system": "", "/proc/1/comm": "tini\n", "/proc/self/mountinfo": hybridMountinfo},
			wantName: "cgroup", wantRoot: "/sys/fs/cgroup/unified"},
		{name: "systemd PID 1 but not booted (no /run/systemd/system)", probe: fakeProbe{"/proc/1/comm": "systemd\n", "/proc/self/mountinfo": unifiedMountinfo},
			wantName: "cgroup", wantRoot: "/sys/fs/cgroup"},
		{name: "hybrid", probe: fakeProbe{"/proc/1/comm": "sh\n", "/proc/self/mountinfo": hybridMountinfo},
			wantName: "cgroup", wantRoot: "/sys/fs/cgroup/unified"},
		{name: "unified", probe: fakeProbe{"/proc/1/comm": "sh\n", "/proc/self/mountinfo": unifiedMountinfo},
			wantName: "cgroup", wantRoot: "/sys/fs/cgroup"},
		{name: "cgroup2 elsewhere", probe: fakeProbe{"/proc/1/comm": "sh\n", "/proc/self/mountinfo": elsewhereMountinfo},
			wantName: "cgroup", wantRoot: "/run/cg2"},
		{name: "no cgroup2", probe: fakeProbe{"/proc/1/comm": "sh\n", "/proc/self/mountinfo": v1OnlyMountinfo},
			wantErr: "no cgroup2 filesystem is mounted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := detectScoper(tt.probe)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("detectScoper = %v, %v; want error %q", sc, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				if tt.wantName == "systemd" && strings.Contains(err.Error(), "systemd-run is missing") {
					testenv.Skip(t, "systemd-run is not installed here")
				}
				t.Fatal(err)
			}
			if sc.Name() != tt.wantName {
				t.Errorf("detectScoper chose %s, want %s", sc.Name(), tt.wantName)
			}
			if cg, ok := sc.(*CgroupScoper); ok && (cg.Root != tt.wantRoot || cg.Parent != DefaultCgroupParent) {
				t.Errorf("cgroup scoper at %s/%s, want %s/%s", cg.Root, cg.Parent, tt.wantRoot, DefaultCgroupParent)
			}
		})
	}
}

func TestSystemdScoperCommand(t *testing.T) {
	s := &SystemdScoper{Run: "/usr/bin/systemd-run"}
	argv := s.Command(Job{Unit: "mount-0123", Description: "mountkeeper: fuse.sshfs h:/x", Argv: []string{"/bin/mount", "-t", "fuse.sshfs", "h:/x", "/m"}})
	sep := slices.Index(argv, "--")
	if sep < 0 || !slices.Equal(argv[sep+1:], []string{"/bin/mount", "-t", "fuse.sshfs", "h:/x", "/m"}) {
		t.Fatalf("argv %q does not end in -- and the mount command", argv)
	}
	opts := argv[:sep]
	for _, want := range []string{"/usr/bin/systemd-run", "--scope", "--collect", "--description=mountkeeper: fuse.sshfs h:/x"} {
		if !slices.Contains(opts, want) {
			t.Errorf("argv %q lacks %q", argv, want)
		}
	}
	var unit string
	for _, o := range opts {
		if u, ok := strings.CutPrefix(o, "--unit="); ok {
			unit = u
		}
	}
	if !strings.HasPrefix(unit, "mountkeeper-mount-0123-") || !strings.HasSuffix(unit, ".scope") {
		t.Errorf("unit %q, want mountkeeper-mount-0123-<suffix>.scope", unit)
	}
	if again := s.UnitName("mount-0123"); again == unit {
		t.Errorf("two scopes of one mount got the same unit name %s", unit)
	}
}

func TestWithPath(t *testing.T) {
	if got := withPath([]string{"A=1"}); !slices.Equal(got, []string{"A=1", standardPath}) {
		t.Errorf("withPath without PATH = %q", got)
	}
	if got := withPath([]string{"PATH="}); !slices.Contains(got, standardPath) {
		t.Errorf("withPath with an empty PATH = %q", got)
	}
	if got := withPath([]string{"PATH=/x"}); !slices.Equal(got, []string{"PATH=/x"}) {
		t.Errorf("withPath with a PATH = %q", got)
	}
}

// testCgroupScoper returns a CgroupScoper under a parent of this test's own, removed (its
// processes killed first) when the test ends. It skips without root or cgroup2.
func testCgroupScoper(t *testing.T) *CgroupScoper {
	t.Helper()
	testenv.Require(t, "root")
	root, err := liveCgroup2Root()
	if err != nil {
		testenv.Skip(t, "%v", err)
	}
	sc := &CgroupScoper{Root: root, Parent: fmt.Sprintf("mountkeeper-test-%d-%d.slice", os.Getpid(), time.Now().UnixNano())}
	if err := os.Mkdir(filepath.Join(root, sc.Parent), 0o755); err != nil {
		testenv.Skip(t, "cannot create a cgroup here: %v", err)
	}
	t.Cleanup(func() {
		removeCgroupTree(t, filepath.Join(root, sc.Parent))
	})
	return sc
}

// removeCgroupTree kills every process below dir and removes its cgroups, deepest first, and
// the groups of the same name in the cgroup v1 hierarchies.
func removeCgroupTree(t *testing.T, dir string) {
	if err := endCgroupTree(dir); err != nil {
		t.Error(err)
	}
}

// endCgroupTree kills what runs below the cgroup2 dir and removes it, and its namesakes in
// the v1 hierarchies.
func endCgroupTree(dir string) error {
	return errors.Join(killCgroupTree(dir), removeV1Trees(filepath.Base(dir)))
}

func killCgroupTree(dir string) error {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if len(dirs) == 0 {
		return nil
	}
	os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644)
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for try := 0; try < 100; try++ {
			if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// alive says whether pid runs (a zombie, dead but not yet reaped by init, does not).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

func TestCgroupScoperLive(t *testing.T) {
	sc := testCgroupScoper(t)
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()

	// The helper's child stands in for a FUSE daemon: same process group, still running when
	// the scope is asked to go.
	ctx, cancel := context.WithCancel(context.Background())
	cmd, err := sc.Start(ctx, Job{Unit: "mount-test", Argv: []string{"/bin/sh", "-c", "sleep 60 & echo $!; cat /proc/self/cgroup; wait"}, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })

	want := "/" + sc.Parent + "/mount-test"
	if got, err := testsupport.CgroupV2(cmd.Process.Pid); err != nil || got != want {
		t.Errorf("helper runs in cgroup %q (%v), want %q", got, err, want)
	}
	if sid, _ := unix.Getsid(cmd.Process.Pid); sid != cmd.Process.Pid {
		t.Errorf("helper's session is %d, want its own (%d)", sid, cmd.Process.Pid)
	}
	if err := sc.Remove("mount-test"); err == nil || !strings.Contains(err.Error(), "still has processes") {
		t.Errorf("Remove of a busy scope = %v, want 'still has processes'", err)
	}

	// Cancelling kills the helper's whole process group, the sleep included.
	var sleepPid int
	for deadline := time.Now().Add(5 * time.Second); sleepPid == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		data, _ := os.ReadFile(out.Name())
		if line, _, ok := strings.Cut(string(data), "\n"); ok {
			sleepPid, _ = strconv.Atoi(line)
		}
	}
	if sleepPid == 0 {
		t.Fatal("the helper did not report its child")
	}
	cancel()
	cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := sc.Remove("mount-test"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("scope not removable 5s after its process group was killed: %v", err)
		}
	}
	if _, err := os.Stat(sc.Dir("mount-test")); !os.IsNotExist(err) {
		t.Errorf("cgroup %s still exists after Remove: %v", sc.Dir("mount-test"), err)
	}
	if alive(sleepPid) {
		t.Errorf("the helper's child %d survived the cancel", sleepPid)
	}
	if err := sc.Remove("mount-test"); err != nil {
		t.Errorf("Remove of a removed scope: %v", err)
	}
}

// liveCgroup2Root is where this machine mounts the cgroup2 hierarchy.
func liveCgroup2Root() (string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	return cgroup2Root(mi)
}

// TestRmdirCgroup: only a group that still has something in it is busy (worth a retry); a
// group that cannot be removed for another reason is an error of its own, so that removeV1
// does not hold the cgroup2 removal back forever for it.
func TestRmdirCgroup(t *testing.T) {
	dir := t.TempDir()
	full, file := filepath.Join(dir, "full"), filepath.Join(dir, "file")
	os.MkdirAll(filepath.Join(full, "child"), 0o755)
	os.WriteFile(file, nil, 0o644)
	if err := rmdirCgroup(full); !errors.Is(err, errBusy) {
		t.Errorf("rmdir of a group with a child = %v, want busy", err)
	}
	if err := rmdirCgroup(file); err == nil || errors.Is(err, errBusy) {
		t.Errorf("rmdir of what cannot be removed (ENOTDIR) = %v, want an error that is not busy", err)
	}
	if err := rmdirCgroup(filepath.Join(dir, "gone")); err != nil {
		t.Errorf("rmdir of a group that is gone = %v, want nil", err)
	}
	if err := rmdirCgroup(filepath.Join(full, "child")); err != nil {
		t.Errorf("rmdir of an empty group = %v", err)
	}
}
