package idmap

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// The kernel's answers, asked the way runc asks: a tmpfs can be idmapped from Linux 6.3 on
// (before, the kernel refuses it as it refuses proc), proc cannot.
func TestCheck(t *testing.T) {
	testenv.Require(t, "root")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	p := &Prober{}
	err := p.Check(dir)
	var ns *NotSupportedError
	switch {
	case testenv.KernelAtLeast(6, 3) && err != nil:
		t.Errorf("tmpfs: %v, want nil", err)
	case !testenv.KernelAtLeast(6, 3) && (!errors.As(err, &ns) || ns.FSType != "tmpfs" || !errors.Is(err, unix.EINVAL)):
		t.Errorf("tmpfs before Linux 6.3: %v, want a NotSupportedError for tmpfs (EINVAL)", err)
	}
	err = p.Check("/proc")
	if !errors.As(err, &ns) || ns.FSType != "proc" || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("/proc: %v, want a NotSupportedError for proc (EINVAL)", err)
	}
	t.Log(err)
	if err := p.Check(dir + "/missing"); err == nil || errors.As(err, &ns) {
		t.Errorf("missing source: %v, want an error that is not NotSupported", err)
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
