package netmount

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// fakeEnv is a node described by tables.
type fakeEnv struct {
	programs map[string]bool // on PATH
	helpers  map[string]bool // in /sbin
	fss      map[string]bool
	fssErr   error
	files    map[string]bool
}

func (f fakeEnv) LookPath(file string) (string, error) {
	if f.programs[file] {
		return "/usr/bin/" + file, nil
	}
	return "", errors.New("not found")
}

func (f fakeEnv) LookHelper(name string) (string, error) {
	if f.helpers[name] {
		return "/sbin/" + name, nil
	}
	return "", errors.New("not found")
}

func (f fakeEnv) KernelSupports(fs string) (bool, error) { return f.fss[fs], f.fssErr }
func (f fakeEnv) Exists(path string) bool                { return f.files[path] }

// fullEnv has everything every type needs.
func fullEnv() fakeEnv {
	return fakeEnv{
		programs: map[string]bool{"mount": true, "sshfs": true, "s3fs": true},
		helpers: map[string]bool{"mount.nfs": true, "mount.nfs4": true, "mount.cifs": true, "mount.glusterfs": true,
			"mount.ceph": true, "mount.fuse": true},
		fss:   map[string]bool{"nfs": true, "nfs4": true, "cifs": true, "ceph": true, "fuse": true},
		files: map[string]bool{"/dev/fuse": true},
	}
}

func TestPreflight(t *testing.T) {
	without := func(change func(*fakeEnv)) fakeEnv {
		e := fullEnv()
		change(&e)
		return e
	}
	nfs := netspec.Spec{Type: "nfs", Source: "server:/export"}
	sshfs := netspec.Spec{Type: "fuse.sshfs", Source: "root@h:/x"}
	tests := []struct {
		name string
		env  fakeEnv
		spec netspec.Spec
		want []string // substrings of the error; nil: no error
		not  []string // must not be in the error
	}{
		{name: "nfs ok", env: fullEnv(), spec: nfs},
		{name: "nfs4 ok", env: fullEnv(), spec: netspec.Spec{Type: "nfs4", Source: "server:/"}},
		{name: "cifs ok", env: fullEnv(), spec: netspec.Spec{Type: "cifs", Source: "//s/share"}},
		{name: "glusterfs ok", env: fullEnv(), spec: netspec.Spec{Type: "glusterfs", Source: "s:/vol"}},
		{name: "ceph ok", env: fullEnv(), spec: netspec.Spec{Type: "ceph", Source: "mon:/"}},
		{name: "sshfs ok", env: fullEnv(), spec: sshfs},
		{name: "sshfs with its own helper and no mount.fuse", spec: sshfs,
			env: without(func(e *fakeEnv) { e.helpers = map[string]bool{"mount.fuse.sshfs": true} })},

		{name: "no mount.nfs", spec: nfs, env: without(func(e *fakeEnv) { delete(e.helpers, "mount.nfs") }),
			want: []string{`mount.nfs (the helper "mount -t nfs" runs) not found: install nfs-common (Debian/Ubuntu) or nfs-utils (RHEL/Fedora)`},
			not:  []string{"kernel"}},
		{name: "no mount.nfs4", spec: netspec.Spec{Type: "nfs4", Source: "s:/"}, env: without(func(e *fakeEnv) { delete(e.helpers, "mount.nfs4") }),
			want: []string{"mount.nfs4 (", "install nfs-common (Debian/Ubuntu) or nfs-utils (RHEL/Fedora)"}},
		{name: "no mount.cifs", spec: netspec.Spec{Type: "cifs", Source: "//s/share"}, env: without(func(e *fakeEnv) { delete(e.helpers, "mount.cifs") }),
			want: []string{"mount.cifs (", "install cifs-utils (Debian/Ubuntu) or cifs-utils (RHEL/Fedora)"}},
		{name: "no mount.glusterfs", spec: netspec.Spec{Type: "glusterfs", Source: "s:/v"}, env: without(func(e *fakeEnv) { delete(e.helpers, "mount.glusterfs") }),
			want: []string{"mount.glusterfs (", "install glusterfs-client (Debian/Ubuntu) or glusterfs-fuse (RHEL/Fedora)"}},
		{name: "no mount.ceph", spec: netspec.Spec{Type: "ceph", Source: "m:/"}, env: without(func(e *fakeEnv) { delete(e.helpers, "mount.ceph") }),
			want: []string{"mount.ceph (", "install ceph-common (Debian/Ubuntu) or ceph-common (RHEL/Fedora)"}},
		{name: "no sshfs", spec: sshfs, env: without(func(e *fakeEnv) { delete(e.programs, "sshfs") }),
			want: []string{"sshfs (the FUSE program of fuse.sshfs) not found: install sshfs (Debian/Ubuntu) or fuse-sshfs (RHEL/Fedora)"},
			not:  []string{"mount.fuse"}},
		{name: "no mount.fuse", spec: sshfs, env: without(func(e *fakeEnv) { delete(e.helpers, "mount.fuse") }),
			want: []string{`mount.fuse (the helper "mount -t fuse.sshfs" runs; mount.fuse.sshfs would do too) not found: install fuse3 (Debian/Ubuntu) or fuse3 (RHEL/Fedora)`}},
		{name: "unknown FUSE program", spec: netspec.Spec{Type: "fuse.frobfs", Source: "x"}, env: fullEnv(),
			want: []string{"frobfs (the FUSE program of fuse.frobfs) not found: install the package that provides it"}},
		{name: "no mount(8)", spec: nfs, env: without(func(e *fakeEnv) { delete(e.programs, "mount") }),
			want: []string{"mount not found: install mount (Debian/Ubuntu) or util-linux (RHEL/Fedora)"}},

		{name: "kernel without nfs", spec: nfs, env: without(func(e *fakeEnv) { delete(e.fss, "nfs") }),
			want: []string{`the kernel does not support nfs (not in /proc/filesystems, no module for it): run "modprobe nfs"`},
			not:  []string{"mount.nfs"}},
		{name: "kernel without nfs4", spec: netspec.Spec{Type: "nfs4", Source: "s:/"}, env: without(func(e *fakeEnv) { delete(e.fss, "nfs4") }),
			want: []string{`the kernel does not support nfs4`, `"modprobe nfsv4"`}},
		{name: "kernel without cifs", spec: netspec.Spec{Type: "cifs", Source: "//s/x"}, env: without(func(e *fakeEnv) { delete(e.fss, "cifs") }),
			want: []string{`the kernel does not support cifs`, `"modprobe cifs"`}},
		{name: "kernel without ceph", spec: netspec.Spec{Type: "ceph", Source: "m:/"}, env: without(func(e *fakeEnv) { delete(e.fss, "ceph") }),
			want: []string{`the kernel does not support ceph`, `"modprobe ceph"`}},
		{name: "kernel without fuse", spec: sshfs, env: without(func(e *fakeEnv) { delete(e.fss, "fuse") }),
			want: []string{`the kernel does not support fuse`, `"modprobe fuse"`}},
		{name: "glusterfs needs fuse", spec: netspec.Spec{Type: "glusterfs", Source: "s:/v"}, env: without(func(e *fakeEnv) { delete(e.fss, "fuse") }),
			want: []string{`the kernel does not support fuse`}},
		{name: "no /dev/fuse", spec: sshfs, env: without(func(e *fakeEnv) { e.files = nil }),
			want: []string{`/dev/fuse does not exist: run "modprobe fuse"`}},
		{name: "nfs needs no /dev/fuse", spec: nfs, env: without(func(e *fakeEnv) { e.files = nil })},
		{name: "filesystems unreadable", spec: nfs, env: without(func(e *fakeEnv) { e.fssErr = errors.New("EACCES") }),
			want: []string{"cannot tell whether the kernel supports nfs: EACCES"}},

		{name: "a node like this one: no NFS at all", spec: nfs,
			env:  without(func(e *fakeEnv) { delete(e.helpers, "mount.nfs"); delete(e.fss, "nfs") }),
			want: []string{"mount.nfs (", "nfs-common (Debian/Ubuntu) or nfs-utils (RHEL/Fedora)", "the kernel does not support nfs"}},
		{name: "invalid spec", spec: netspec.Spec{Type: "nfs", Source: "x"}, env: fullEnv(),
			want: []string{"is not of the form server:/export"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Preflight(tt.env, tt.spec)
			if tt.want == nil {
				if err != nil {
					t.Errorf("Preflight(%s) = %v, want nil", tt.spec, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Preflight(%s) = nil, want an error containing %q", tt.spec, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Preflight(%s)\ngot:  %v\nwant: ...%s...", tt.spec, err, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("Preflight(%s) = %v; it names %q, which is not missing", tt.spec, err, n)
				}
			}
		})
	}
}

func TestParseFilesystems(t *testing.T) {
	got := parseFilesystems([]byte("nodev\tsysfs\nnodev\tfuse\n\text4\nnodev\tnfs4\n"))
	for _, fs := range []string{"sysfs", "fuse", "ext4", "nfs4"} {
		if !got[fs] {
			t.Errorf("parseFilesystems misses %s: %v", fs, got)
		}
	}
	if got["nodev"] || len(got) != 4 {
		t.Errorf("parseFilesystems = %v, want exactly sysfs, fuse, ext4, nfs4", got)
	}
}

func TestParseFSAliases(t *testing.T) {
	got := parseFSAliases([]byte("alias fs-nfs nfs\nalias fs-nfs4 nfsv4\nalias pci:v00008086d* e1000e\nalias fs-ceph ceph\n"))
	if len(got) != 3 || !got["nfs"] || !got["nfs4"] || !got["ceph"] {
		t.Errorf("parseFSAliases = %v, want nfs, nfs4, ceph", got)
	}
}

// TestLiveEnvHere checks LiveEnv against this node: programs a Debian node always has, and
// what the kernel says.
func TestLiveEnvHere(t *testing.T) {
	if _, err := (LiveEnv{}).LookPath("mount"); err != nil {
		t.Errorf("LookPath(mount): %v", err)
	}
	if _, err := (LiveEnv{}).LookPath("mountkeeper-no-such-program"); err == nil {
		t.Error("LookPath found a program that does not exist")
	}
	t.Setenv("PATH", "") // as NRI starts plugins
	if p, err := (LiveEnv{}).LookPath("mount"); err != nil || !filepath.IsAbs(p) {
		t.Errorf("LookPath(mount) without PATH = %q, %v; want an absolute path", p, err)
	}
	if ok, err := (LiveEnv{}).KernelSupports("proc"); !ok || err != nil {
		t.Errorf("KernelSupports(proc) = %v, %v; want true", ok, err)
	}
	if ok, err := (LiveEnv{}).KernelSupports("mountkeeper-none"); ok || err != nil {
		t.Errorf("KernelSupports(mountkeeper-none) = %v, %v; want false", ok, err)
	}
	if _, err := os.Stat("/sbin/mount.fuse"); err == nil {
		if _, err := (LiveEnv{}).LookHelper("mount.fuse"); err != nil {
			t.Errorf("LookHelper(mount.fuse): %v, but /sbin/mount.fuse exists", err)
		}
	}
	if _, err := (LiveEnv{}).LookHelper("mount.mountkeeper-none"); err == nil {
		t.Error("LookHelper found a helper that does not exist")
	}
}

// TestKernelSupports: a filesystem type is supported if /proc/filesystems lists it, or if a
// module has its fs- alias; modules.alias, about 1 MB, is read only for a type not listed.
func TestKernelSupports(t *testing.T) {
	files := map[string]string{
		"/proc/filesystems": "nodev\tproc\nnodev\tnfs4\n\text4\n",
		"modules.alias":     "alias fs-cifs cifs\nalias fs-smb3 cifs\nalias pci:v00008086d* e1000e\n",
	}
	tests := []struct {
		fs            string
		want          bool
		wantAliasRead bool
	}{
		{"nfs4", true, false},
		{"ext4", true, false},
		{"cifs", true, true},
		{"ceph", false, true},
	}
	for _, tc := range tests {
		aliasRead := false
		read := func(path string) ([]byte, error) {
			if filepath.Base(path) == "modules.alias" {
				aliasRead = true
				path = "modules.alias"
			}
			data, ok := files[path]
			if !ok {
				return nil, os.ErrNotExist
			}
			return []byte(data), nil
		}
		got, err := kernelSupports(read, tc.fs)
		if err != nil || got != tc.want || aliasRead != tc.wantAliasRead {
			t.Errorf("%s: supported %v (%v), modules.alias read %v; want %v, read %v", tc.fs, got, err, aliasRead, tc.want, tc.wantAliasRead)
		}
	}
}
