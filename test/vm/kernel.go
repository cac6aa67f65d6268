package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// Kernel is one unpacked kernel package: Dir/boot/vmlinuz-Release and
// Dir/usr/lib/modules/Release (with depmod's indexes).
type Kernel struct {
	Name    string // the directory's name, which is the kernel's series: "5.10", "6.1", "6.12"
	Release string // uname -r in the guest, e.g. "6.1.0-50-cloud-amd64"
	Dir     string
}

// Vmlinuz is the kernel image QEMU boots.
func (k Kernel) Vmlinuz() string { return filepath.Join(k.Dir, "boot", "vmlinuz-"+k.Release) }

// ModulesDir holds the kernel's modules; the guest sees it as /usr/lib/modules.
func (k Kernel) ModulesDir() string { return filepath.Join(k.Dir, "usr", "lib", "modules") }

// KernelsDir is where test/tools/install.sh unpacks the kernels.
func KernelsDir() string {
	cache := os.Getenv("MOUNTKEEPER_CACHE")
	if cache == "" {
		cache = "/var/cache/mountkeeper-test"
	}
	return filepath.Join(cache, "kernels")
}

// Want is the kernels install.sh installs, oldest first.
var Want = []string{"5.10", "6.1", "6.12"}

// LoadKernel reads the kernel unpacked in dir.
func LoadKernel(dir string) (Kernel, error) {
	releases, err := filepath.Glob(filepath.Join(dir, "usr", "lib", "modules", "*"))
	if err != nil || len(releases) != 1 {
		return Kernel{}, fmt.Errorf("%s: want one usr/lib/modules/RELEASE, found %v (%v)", dir, releases, err)
	}
	k := Kernel{Name: filepath.Base(dir), Release: filepath.Base(releases[0]), Dir: dir}
	for _, p := range []string{k.Vmlinuz(), filepath.Join(releases[0], "modules.dep")} {
		if _, err := os.Stat(p); err != nil {
			return Kernel{}, fmt.Errorf("kernel %s is incomplete: %v", k.Name, err)
		}
	}
	return k, nil
}

// Kernels returns the kernels named in Want, skipping tb (failing it under
// MOUNTKEEPER_REQUIRE_ALL=1) when one is missing or this machine cannot run guests.
func Kernels(tb testing.TB) []Kernel {
	tb.Helper()
	Require(tb)
	var ks []Kernel
	for _, name := range Want {
		k, err := LoadKernel(filepath.Join(KernelsDir(), name))
		if err != nil {
			testenv.Skip(tb, "kernel %s missing (bash test/tools/install.sh kernels installs it): %v", name, err)
		}
		ks = append(ks, k)
	}
	return ks
}

// Require skips tb (fails it under MOUNTKEEPER_REQUIRE_ALL=1) unless this machine has what a
// guest needs: root (virtiofsd shares the host's root), QEMU, virtiofsd, a static busybox and xz.
func Require(tb testing.TB) {
	tb.Helper()
	testenv.Require(tb, "root", "qemu-system-x86_64", "xz", busybox)
	if _, _, err := findVirtiofsd(); err != nil {
		testenv.Skip(tb, "%v", err)
	}
}

// TempDir returns a new directory that a guest sees at the same path, removed when tb ends:
// a t.TempDir is under /tmp, which the guest mounts a tmpfs over.
func TempDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp(guestVisibleTemp, "mountkeeper-vm-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// guestVisibleTemp holds the temporary directories of runs and tests: a guest mounts its own
// /tmp, /run and /dev/shm, not /var/tmp.
const guestVisibleTemp = "/var/tmp"
