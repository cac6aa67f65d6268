package subpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
)

func TestStaleRoot(t *testing.T) {
	tests := []struct {
		root string
		want string
		ok   bool
	}{
		{root: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~configmap/cfg/..2026_11_22_07_00_00.1/app.conf//deleted",
			want: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~configmap/cfg/..2026_11_22_07_00_00.1/app.conf", ok: true},
		{root: "/..2026_11_22_07_00_00.1/token//deleted", want: "/..2026_11_22_07_00_00.1/token", ok: true},
		// A name that ends with a space keeps it: the kernel writes "name //deleted".
		{root: "/v/sp ace //deleted", want: "/v/sp ace ", ok: true},
		{root: "/v/app.conf", ok: false},
		{root: "/v/app.conf (deleted)", ok: false},
		{root: "//deleted", ok: false},
		{root: "", ok: false},
	}
	for _, tt := range tests {
		got, ok := staleRoot(tt.root)
		if got != tt.want || ok != tt.ok {
			t.Errorf("staleRoot(%q) = %q, %v; want %q, %v", tt.root, got, ok, tt.want, tt.ok)
		}
	}
}

func TestWithinAndFSPath(t *testing.T) {
	tests := []struct {
		p, dir string
		rel    string
		ok     bool
	}{
		{p: "/a/b/c", dir: "/a", rel: "b/c", ok: true},
		{p: "/a", dir: "/a", rel: "", ok: true},
		{p: "/a/b", dir: "/", rel: "a/b", ok: true},
		{p: "/ab/c", dir: "/a", ok: false},
		{p: "/a/../etc", dir: "/a", ok: false},
		{p: "/b", dir: "/a", ok: false},
		{p: "a/b", dir: "a", ok: false},
	}
	for _, tt := range tests {
		rel, ok := within(tt.dir, tt.p)
		if rel != tt.rel || ok != tt.ok {
			t.Errorf("within(%q, %q) = %q, %v; want %q, %v", tt.dir, tt.p, rel, ok, tt.rel, tt.ok)
		}
	}

	fsTests := []struct {
		name               string
		p, point, mntRoot  string
		want, wantErrSubst string
	}{
		{name: "root fs", p: "/var/lib/kubelet/pods/u/volumes/x/v", point: "/", mntRoot: "/", want: "/var/lib/kubelet/pods/u/volumes/x/v"},
		{name: "volume is its own tmpfs", p: "/k/pods/u/volumes/kubernetes.io~secret/s", point: "/k/pods/u/volumes/kubernetes.io~secret/s", mntRoot: "/", want: "/"},
		{name: "kubelet root is a bind of a subdir", p: "/var/lib/kubelet/pods/u/volumes/x/v", point: "/var/lib/kubelet", mntRoot: "/data/kubelet", want: "/data/kubelet/pods/u/volumes/x/v"},
		{name: "not on that mount", p: "/other/v", point: "/var/lib/kubelet", mntRoot: "/", wantErrSubst: "is not on the mount at /var/lib/kubelet"},
		{name: "mount of a deleted dir", p: "/k/v", point: "/k", mntRoot: "/old//deleted", wantErrSubst: "not a live path"},
	}
	for _, tt := range fsTests {
		got, err := fsPath(tt.p, tt.point, tt.mntRoot)
		if tt.wantErrSubst != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErrSubst) {
				t.Errorf("%s: fsPath error = %v, want it to contain %q", tt.name, err, tt.wantErrSubst)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: fsPath(%q, %q, %q) = %q, %v; want %q", tt.name, tt.p, tt.point, tt.mntRoot, got, err, tt.want)
		}
	}
}

func TestPlanResolution(t *testing.T) {
	const ts = "..2026_11_22_07_00_00.123456789"
	tests := []struct {
		name      string
		plugin    string
		remainder string
		want      Resolution
		wantErr   string
	}{
		{name: "configMap file key", plugin: "kubernetes.io~configmap", remainder: ts + "/app.conf",
			want: Resolution{Rel: "..data/app.conf", SubPath: "app.conf", Key: true}},
		{name: "nested key", plugin: "kubernetes.io~configmap", remainder: ts + "/conf.d/app.ini",
			want: Resolution{Rel: "..data/conf.d/app.ini", SubPath: "conf.d/app.ini", Key: true}},
		{name: "directory key", plugin: "kubernetes.io~projected", remainder: ts + "/conf.d",
			want: Resolution{Rel: "..data/conf.d", SubPath: "conf.d", Key: true}},
		{name: "the whole payload (subPath ..data)", plugin: "kubernetes.io~secret", remainder: ts,
			want: Resolution{Rel: "..data", SubPath: "", Key: true}},
		{name: "downwardAPI", plugin: "kubernetes.io~downward-api", remainder: ts + "/labels",
			want: Resolution{Rel: "..data/labels", SubPath: "labels", Key: true}},
		{name: "emptyDir", plugin: "kubernetes.io~empty-dir", remainder: "data/x.conf",
			want: Resolution{Rel: "data/x.conf", SubPath: "data/x.conf"}},
		{name: "csi", plugin: "kubernetes.io~csi", remainder: ts + "/x",
			want: Resolution{Rel: ts + "/x", SubPath: ts + "/x"}},
		{name: "atomic writer, no timestamp dir", plugin: "kubernetes.io~configmap", remainder: "app.conf",
			wantErr: "app.conf is not inside a ..<timestamp> directory of the atomic writer"},
		{name: "atomic writer, ..data itself", plugin: "kubernetes.io~configmap", remainder: "..data/app.conf",
			wantErr: "not inside a ..<timestamp> directory"},
		{name: "atomic writer, timestamp without digits", plugin: "kubernetes.io~configmap", remainder: "..2026_11_22_07_00_00./a",
			wantErr: "not inside a ..<timestamp> directory"},
		{name: "dot-dot in an atomic-writer remainder", plugin: "kubernetes.io~configmap", remainder: ts + "/../../secret/x",
			wantErr: `has a ".." component`},
		{name: "dot-dot in an emptyDir remainder", plugin: "kubernetes.io~empty-dir", remainder: "data/../../../etc/passwd",
			wantErr: `has a ".." component`},
		{name: "absolute", plugin: "kubernetes.io~empty-dir", remainder: "/etc/passwd", wantErr: "is absolute"},
		{name: "empty component", plugin: "kubernetes.io~empty-dir", remainder: "a//b", wantErr: `has a "" component`},
		{name: "empty", plugin: "kubernetes.io~empty-dir", remainder: "", wantErr: "empty path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := planResolution(tt.plugin, tt.remainder)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("planResolution(%q, %q) error = %v, want it to contain %q", tt.plugin, tt.remainder, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("planResolution(%q, %q) = %+v, %v; want %+v", tt.plugin, tt.remainder, got, err, tt.want)
			}
		})
	}
}

func TestPickVolume(t *testing.T) {
	tests := []struct {
		holders []string
		wantErr string
	}{
		{holders: []string{"kubernetes.io~configmap/cfg"}},
		{holders: nil, wantErr: "/srv/logs/app.log lies in no volume directory of the pod (a hostPath, or a volume kubelet keeps elsewhere)"},
		{holders: []string{"kubernetes.io~secret/cfg", "kubernetes.io~configmap/cfg"},
			wantErr: "/srv/logs/app.log lies in 2 volume directories of the pod (kubernetes.io~configmap/cfg, kubernetes.io~secret/cfg)"},
	}
	for _, tt := range tests {
		err := pickVolume("/srv/logs/app.log", tt.holders)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("pickVolume(%q) = %v, want nil", tt.holders, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrUnknownVolume) {
			t.Errorf("pickVolume(%q) = %v, want an ErrUnknownVolume naming %q", tt.holders, err, tt.wantErr)
		}
	}
}

func TestThroughData(t *testing.T) {
	const ts = "..2026_11_22_07_00_00.123"
	tests := []struct {
		rel, link, want, wantErr string
	}{
		{rel: "..data/app.conf", link: ts, want: ts + "/app.conf"},
		{rel: "..data/conf.d/app.ini", link: ts, want: ts + "/conf.d/app.ini"},
		{rel: "..data", link: ts, want: ts},
		{rel: "app.conf", link: ts, wantErr: `"app.conf" is not ..data nor a key below it`},
		{rel: "..data/../x", link: ts, wantErr: "is not ..data nor a key below it"},
		{rel: "..data/app.conf", link: "/etc", wantErr: `..data points to "/etc", not to a ..<timestamp> directory`},
		{rel: "..data/app.conf", link: "../" + ts, wantErr: "not to a ..<timestamp> directory"},
	}
	for _, tt := range tests {
		got, err := ThroughData(tt.rel, tt.link)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ThroughData(%q, %q) = %q, %v; want an error containing %q", tt.rel, tt.link, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ThroughData(%q, %q) = %q, %v; want %q", tt.rel, tt.link, got, err, tt.want)
		}
	}
}

// TestReasonOf: each way a copy or repair fails is counted under its reason.
func TestReasonOf(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", ErrUnknownVolume), ReasonUnknownVolume},
		{fmt.Errorf("x: %w", ErrOverBudget), ReasonOverBudget},
		{&os.PathError{Op: "write", Path: "/x", Err: unix.ENOSPC}, ReasonPoolFull},
		{fmt.Errorf("x: %w", ErrNotRegular), ReasonNotRegular},
		{fmt.Errorf("copy given up: %w", context.DeadlineExceeded), ReasonTimeout},
		{fmt.Errorf("check: %w", bounded.ErrNoAnswer), ReasonTimeout},
		{&os.PathError{Op: "openat2", Path: "/x", Err: unix.ENOENT}, ReasonNotFound},
		{fmt.Errorf("x: %w", ErrChanged), ReasonChanged},
		{errors.New("permission denied"), ReasonError},
	}
	for _, tt := range tests {
		if got := reasonOf(tt.err); got != tt.want {
			t.Errorf("reasonOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
		if !slices.Contains(Reasons, tt.want) {
			t.Errorf("reason %q is not in Reasons", tt.want)
		}
	}
}

func TestSameType(t *testing.T) {
	tests := []struct {
		stale, now uint32
		wantErr    string
	}{
		{stale: unix.S_IFREG, now: unix.S_IFREG | 0o644},
		{stale: unix.S_IFDIR, now: unix.S_IFDIR},
		{stale: unix.S_IFREG, now: unix.S_IFDIR, wantErr: "it is a directory now, but the stale bind was a regular file"},
		{stale: unix.S_IFDIR, now: unix.S_IFREG, wantErr: "it is a regular file now, but the stale bind was a directory"},
		{stale: unix.S_IFREG, now: unix.S_IFIFO, wantErr: "it is a fifo now"},
		{stale: unix.S_IFREG, now: unix.S_IFLNK, wantErr: "it is a symlink now"},
	}
	for _, tt := range tests {
		err := sameType(tt.stale, tt.now)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("sameType(%#o, %#o) = %v, want %q", tt.stale, tt.now, err, tt.wantErr)
		}
	}
}

func TestResolveFailure(t *testing.T) {
	key := Resolution{Rel: "..data/conf.d/app.ini", SubPath: "conf.d/app.ini", Key: true}
	sub := Resolution{Rel: "data/x", SubPath: "data/x"}
	wrap := func(errno error) error { return &fs.PathError{Op: "openat2", Path: "/v/x", Err: errno} }
	tests := []struct {
		kind string
		r    Resolution
		err  error
		want string
	}{
		{"configMap", key, wrap(unix.ENOENT), "key conf.d/app.ini is no longer in configMap volume cfg"},
		{"configMap", key, wrap(unix.ENOTDIR), "key conf.d/app.ini is no longer in configMap volume cfg"},
		{"emptyDir", sub, wrap(unix.ENOENT), "subPath data/x is no longer in emptyDir volume cfg"},
		{"emptyDir", sub, wrap(unix.EXDEV), `subPath data/x of emptyDir volume cfg leads out of the volume (a symlink or ".." points outside); it was not followed`},
		{"secret", key, wrap(unix.ELOOP), "key conf.d/app.ini of secret volume cfg leads through a magic link or a symlink loop; it was not followed"},
		{"secret", key, wrap(unix.EACCES), "cannot open key conf.d/app.ini of secret volume cfg"},
	}
	for _, tt := range tests {
		if got := resolveFailure(tt.kind, "cfg", tt.r, tt.err); got != tt.want {
			t.Errorf("resolveFailure(%s, %+v, %v)\ngot:  %s\nwant: %s", tt.kind, tt.r, tt.err, got, tt.want)
		}
	}
}

func TestIsStale(t *testing.T) {
	tests := []struct {
		info Info
		want bool
	}{
		{Info{Nlink: 0, MountRoot: true, MountRootKnown: true}, true},
		{Info{Nlink: 0, MountRootKnown: false}, true},
		{Info{Nlink: 1, MountRoot: true, MountRootKnown: true}, false},
		// No link left but not a mount: whatever a filesystem means by it, no bind is stale.
		{Info{Nlink: 0, MountRoot: false, MountRootKnown: true}, false},
	}
	for _, tt := range tests {
		if got := isStale(tt.info); got != tt.want {
			t.Errorf("isStale(%+v) = %v, want %v", tt.info, got, tt.want)
		}
	}
}

func TestVolumeKind(t *testing.T) {
	tests := []struct {
		plugin, kind string
		atomic       bool
	}{
		{"kubernetes.io~configmap", "configMap", true},
		{"kubernetes.io~secret", "secret", true},
		{"kubernetes.io~downward-api", "downwardAPI", true},
		{"kubernetes.io~projected", "projected", true},
		{"kubernetes.io~empty-dir", "emptyDir", false},
		{"kubernetes.io~csi", "csi", false},
		{"kubernetes.io~something-new", "something-new", false},
	}
	for _, tt := range tests {
		kind, atomic := volumeKind(tt.plugin)
		if kind != tt.kind || atomic != tt.atomic {
			t.Errorf("volumeKind(%s) = %s, %v; want %s, %v", tt.plugin, kind, atomic, tt.kind, tt.atomic)
		}
	}
}

func TestNeedsPrivate(t *testing.T) {
	private, shared, slave := Mount{}, Mount{Shared: true}, Mount{Slave: true}
	tests := []struct {
		stale, now Mount
		want       bool
	}{
		{stale: private, now: shared, want: true},
		{stale: private, now: slave, want: true},
		{stale: private, now: private, want: false},
		{stale: shared, now: shared, want: false}, // kubelet's bind was a shared peer: so is the new one
		{stale: slave, now: slave, want: false},
		{stale: slave, now: shared, want: false},
	}
	for _, tt := range tests {
		if got := needsPrivate(tt.stale, tt.now); got != tt.want {
			t.Errorf("needsPrivate(stale %s, now %s) = %v, want %v", tt.stale.Propagation(), tt.now.Propagation(), got, tt.want)
		}
	}
}

func TestVolumeContent(t *testing.T) {
	for plugin, want := range map[string]string{"kubernetes.io~csi": "mount", "kubernetes.io~configmap": "", "kubernetes.io~x": ""} {
		if got := volumeContent(plugin); got != want {
			t.Errorf("volumeContent(%s) = %q, want %q", plugin, got, want)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	tg := Target{Path: "/k/pods/u/volume-subpaths/cfg/app/0", PodUID: "u", Volume: "cfg", Container: "app"}
	cause := &fs.PathError{Op: "openat2", Path: "/k/pods/u/volumes/kubernetes.io~configmap/cfg/..data/conf.d/app.ini", Err: unix.ENOENT}
	err := error(&Error{Target: tg, Reason: "key conf.d/app.ini is no longer in configMap volume cfg", Err: cause})
	want := "stale subPath mount /k/pods/u/volume-subpaths/cfg/app/0 (pod u, container app, volume cfg) not repaired: " +
		"key conf.d/app.ini is no longer in configMap volume cfg: openat2 /k/pods/u/volumes/kubernetes.io~configmap/cfg/..data/conf.d/app.ini: no such file or directory"
	if err.Error() != want {
		t.Errorf("Error()\ngot:  %s\nwant: %s", err, want)
	}
	if !errors.Is(err, unix.ENOENT) {
		t.Errorf("%v does not wrap ENOENT", err)
	}
	notStale := fmt.Errorf("x: %w", &Error{Target: tg, Reason: "r", Err: ErrNotStale})
	if !errors.Is(notStale, ErrNotStale) {
		t.Errorf("%v does not wrap ErrNotStale", notStale)
	}
}
