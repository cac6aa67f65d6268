package netmount

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/test/privatens"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// TestReplaceDeadReachesSlavesAndKeepsOneMount plays the heal with tmpfs mounts standing in
// for the filesystem: mounts/ is a shared mount, the "dead" mount is at mounts/key, and
// "containers" are rslave and rshared recursive binds of it (an rprivate one too), made at
// different times. After each of five replacements every rslave/rshared container reads the
// new generation at the same path, the rprivate one does not, and mounts/key holds one mount.
func TestReplaceDeadReachesSlavesAndKeepsOneMount(t *testing.T) {
	testenv.Require(t, "root")
	if !privatens.Run(t) {
		return
	}
	dir := t.TempDir()
	mounts := filepath.Join(dir, "mounts")
	ctrs := filepath.Join(dir, "ctrs") // the containers' side: private, as a container's root is
	heal := filepath.Join(dir, "heal")
	for _, d := range []string{mounts, ctrs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(mounts, mounts, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", mounts, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	if err := makePrivateDir(ctrs); err != nil {
		t.Fatal(err)
	}
	if err := makePrivateDir(heal); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range []string{ctrs, heal, mounts} {
			unix.Unmount(d, unix.MNT_DETACH)
		}
	})
	target := filepath.Join(mounts, "key")
	os.Mkdir(target, 0o700)
	mountGen := func(path string, gen int) {
		t.Helper()
		if err := unix.Mount("tmpfs", path, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, "gen"), []byte(strconv.Itoa(gen)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mountGen(target, 0)
	container := func(name string, prop uintptr) string {
		t.Helper()
		p := filepath.Join(ctrs, name)
		os.Mkdir(p, 0o755)
		if err := unix.Mount(target, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("", p, "", prop|unix.MS_REC, ""); err != nil {
			t.Fatal(err)
		}
		return p
	}
	slaves := []string{container("slave0", unix.MS_SLAVE), container("shared0", unix.MS_SHARED)}
	private := container("private0", unix.MS_PRIVATE)
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(p, "gen"))
		if err != nil {
			return err.Error()
		}
		return string(b)
	}
	for gen := 1; gen <= 5; gen++ {
		staging := filepath.Join(heal, "key."+strconv.Itoa(gen))
		os.Mkdir(staging, 0o700)
		mountGen(staging, gen)
		if err := replaceDead(target, staging); err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
		os.Remove(staging)
		want := strconv.Itoa(gen)
		if got := read(target); got != want {
			t.Errorf("generation %d: the host path reads %q", gen, got)
		}
		for _, p := range slaves {
			if got := read(p); got != want {
				t.Errorf("generation %d: container %s reads %q", gen, filepath.Base(p), got)
			}
		}
		if got := read(private); got != "0" {
			t.Errorf("generation %d: the rprivate container reads %q, want the old 0", gen, got)
		}
		if n := countMountsAt(t, target); n != 1 {
			t.Errorf("generation %d: %d mounts at the host path, want 1", gen, n)
		}
		if n := countMountsAt(t, heal+"/"); n != 0 {
			t.Errorf("generation %d: %d mounts left below the staging directory", gen, n)
		}
		// a container made now is healed by the next generations too
		slaves = append(slaves, container("slave"+want, unix.MS_SLAVE))
	}
}

func countMountsAt(t *testing.T, path string) int {
	t.Helper()
	filter := testsupport.At(path)
	if strings.HasSuffix(path, "/") { // the mounts below it
		filter = testsupport.Below(path)
	}
	ms, err := testsupport.Mounts(0, filter)
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}
