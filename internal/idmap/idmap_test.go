package idmap

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// The kernel's answers, asked the way runc asks: a tmpfs can be idmapped from Linux 6.3 on
// (before, the kernel refuses it as it refuses proc), proc cannot. Before Linux 5.12 there
// are no idmapped mounts (no mount_setattr): every filesystem is refused, with ENOSYS and a
// reason naming the kernel.
func TestCheck(t *testing.T) {
	testenv.Require(t, "root")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	refusal := unix.EINVAL
	if !testenv.KernelAtLeast(5, 12) {
		refusal = unix.ENOSYS
	}
	p := &Prober{}
	err := p.Check(dir)
	var ns *NotSupportedError
	switch {
	case testenv.KernelAtLeast(6, 3) && err != nil:
		t.Errorf("tmpfs: %v, want nil", err)
	case !testenv.KernelAtLeast(6, 3) && (!errors.As(err, &ns) || ns.FSType != "tmpfs" || !errors.Is(err, refusal)):
		t.Errorf("tmpfs before Linux 6.3: %v, want a NotSupportedError for tmpfs (%s)", err, unix.ErrnoName(refusal))
	}
	// A tmpfs made for the question answers as the mounted one, asked twice (the second from
	// what the Prober kept), and leaves no mount.
	for range 2 {
		terr := p.CheckTmpfs()
		if (terr == nil) != (err == nil) || terr != nil && (!errors.As(terr, &ns) || ns.FSType != "tmpfs" || !errors.Is(terr, refusal)) {
			t.Errorf("CheckTmpfs: %v; the check of a mounted tmpfs: %v", terr, err)
		}
	}
	err = p.Check("/proc")
	if !errors.As(err, &ns) || ns.FSType != "proc" || !errors.Is(err, refusal) {
		t.Fatalf("/proc: %v, want a NotSupportedError for proc (%s)", err, unix.ErrnoName(refusal))
	}
	if refusal == unix.ENOSYS && !strings.Contains(err.Error(), "Linux 5.12") {
		t.Errorf("/proc before Linux 5.12: %q does not say the kernel lacks idmapped mounts", err)
	}
	t.Log(err)
	if err := p.Check(dir + "/missing"); err == nil || errors.As(err, &ns) {
		t.Errorf("missing source: %v, want an error that is not NotSupported", err)
	}
}

// TestNotSupportedReasons: the refusal says whether the filesystem or the kernel falls short.
func TestNotSupportedReasons(t *testing.T) {
	for _, c := range []struct {
		err  *NotSupportedError
		want string
	}{
		{&NotSupportedError{Source: "/s", FSType: "fuse.sshfs", Err: unix.EINVAL},
			"its fuse.sshfs filesystem cannot be idmapped (the kernel answers EINVAL to MOUNT_ATTR_IDMAP)"},
		{&NotSupportedError{Source: "/s", FSType: "ext4", Err: unix.ENOSYS},
			"its ext4 filesystem cannot be idmapped on this kernel, which has no idmapped mounts (it answers ENOSYS to mount_setattr(2); idmapped mounts need Linux 5.12 or newer)"},
		{&NotSupportedError{Source: "/s", Err: unix.ENOSYS, Call: "open_tree"},
			"its (unknown type) filesystem cannot be idmapped on this kernel, which has no idmapped mounts (it answers ENOSYS to open_tree(2); idmapped mounts need Linux 5.12 or newer)"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%#v:\n got %s\nwant %s", c.err, got, c.want)
		}
	}
}

func TestNewUserNSIsNotOurs(t *testing.T) {
	testenv.Require(t, "root")
	ns, err := NewUserNS()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var theirs, ours unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &theirs); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat("/proc/self/ns/user", &ours); err != nil {
		t.Fatal(err)
	}
	if theirs.Ino == ours.Ino {
		t.Fatal("the placeholder's user namespace is ours")
	}
}
