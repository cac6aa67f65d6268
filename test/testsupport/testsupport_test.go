package testsupport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/test/privatens"
)

func TestParseCgroupV2(t *testing.T) {
	for in, want := range map[string]string{
		"12:pids:/x\n0::/k8s.io/abc\n": "/k8s.io/abc",
		"0::/\n":                       "/",
	} {
		if got, ok := ParseCgroupV2(in); !ok || got != want {
			t.Errorf("ParseCgroupV2(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if got, ok := ParseCgroupV2("4:memory:/a\n"); ok {
		t.Errorf("a cgroup v1 file has a cgroup2 path %q", got)
	}
}

func TestTag(t *testing.T) {
	ms, err := ParseMounts(`36 35 98:0 /mnt1 /mnt\040dir rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue`+"\n", nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("parse: %v, %d mounts", err, len(ms))
	}
	if ms[0].Mountpoint != "/mnt dir" {
		t.Errorf("mount point %q: the escaping is not undone", ms[0].Mountpoint)
	}
	for name, want := range map[string]string{"shared": "7", "master": "1"} {
		if got, ok := Tag(ms[0], name); !ok || got != want {
			t.Errorf("Tag(%s) = %q, %v; want %q", name, got, ok, want)
		}
	}
	if got, ok := Tag(ms[0], "propagate_from"); ok {
		t.Errorf("Tag(propagate_from) = %q, want none", got)
	}
}

func TestLineDiff(t *testing.T) {
	got := LineDiff("a\nb\nc\n", "a\nc\nd\n")
	if want := "  a\n- b\n  c\n+ d\n"; got != want {
		t.Errorf("LineDiff = %q, want %q", got, want)
	}
	long := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	got = LineDiff(long, strings.Replace(long, "5\n", "five\n", 1))
	if want := "  ...\n  2\n  3\n  4\n+ five\n- 5\n  6\n  7\n  8\n  ...\n"; got != want {
		t.Errorf("LineDiff of a long text = %q, want %q", got, want)
	}
}

// TestMountsLive: stacked mounts, mounts below a dir and peer groups of real mounts.
func TestMountsLive(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	for range 2 {
		if err := unix.Mount("mk-ts", dir, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("mk-ts-sub", sub, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for unix.Unmount(dir, unix.MNT_DETACH) == nil {
		}
	})
	if ms, err := MountsAt(dir); err != nil || len(ms) != 2 {
		t.Errorf("MountsAt(%s) = %d mounts, %v; want the 2 stacked there", dir, len(ms), err)
	}
	if ms, err := Mounts(os.Getpid(), Below(dir)); err != nil || len(ms) != 1 || ms[0].Mountpoint != sub {
		t.Errorf("Mounts below %s = %+v, %v; want %s alone", dir, ms, err, sub)
	}
	if ms, err := Mounts(0, AtOrBelow(dir)); err != nil || len(ms) != 3 {
		t.Errorf("Mounts at or below %s = %d, %v; want 3", dir, len(ms), err)
	}
	if g, err := PeerGroup(sub); err == nil {
		t.Errorf("PeerGroup of a private mount = %q, want an error", g)
	}
	if err := unix.Mount("", sub, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	g, err := PeerGroup(sub)
	if err != nil || g == "" {
		t.Errorf("PeerGroup of a shared mount = %q, %v", g, err)
	}
	if cg, err := CgroupV2(os.Getpid()); err != nil || !strings.HasPrefix(cg, "/") {
		t.Errorf("CgroupV2 of this process = %q, %v", cg, err)
	}
}

func TestThreadState(t *testing.T) {
	for stat, want := range map[string]byte{
		"42 (sleep) S 1 42":           'S',
		"43 (a b) D 1 43":             'D',
		"44 (x) (y)) R 1 44":          'R',
		"45 (no state)":               0,
		"not a stat line":             0,
		"46 (mountkeeper) D 1 46 0 0": 'D',
	} {
		if got := threadState(stat); got != want {
			t.Errorf("threadState(%q) = %q, want %q", stat, got, want)
		}
	}
}

func TestDStateThreads(t *testing.T) {
	if n, err := DStateThreads(os.Getpid()); err != nil || n != 0 {
		t.Errorf("DStateThreads(self) = %d, %v; want 0 (nothing here sleeps in the kernel)", n, err)
	}
	if _, err := DStateThreads(1 << 30); err == nil {
		t.Error("DStateThreads of a pid that does not exist: no error")
	}
}
