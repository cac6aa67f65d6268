package hook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/specmod"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// fakeMounter records the request instead of mounting.
type fakeMounter struct {
	got   *Request
	calls int
	err   error
}

func (m *fakeMounter) MountInContainer(req Request) error {
	m.calls++
	m.got = &req
	return m.err
}

type fakeNetwork struct{ source string }

func (fakeNetwork) Release(string) {}

func (n fakeNetwork) HostPath(context.Context, netspec.Spec, string) (string, error) {
	if n.source == "" {
		return "", errors.New("server 10.0.0.1 does not answer")
	}
	return n.source, nil
}

const testConfig = `
runtimeClasses:
  fast:
    allowBidirectionalForUnprivileged: true
    mounts:
      - {source: /srv/ab, destination: /a/b, propagation: HostToContainer}
      - {source: /srv/a, destination: /a, propagation: None, readOnly: true}
      - {source: /srv/s, destination: /s, propagation: Bidirectional}
  private:
    mounts:
      - {source: /srv/p, destination: /p}
`

const mountNS = `"linux":{"namespaces":[{"type":"pid"},{"type":"mount"}]}`

func TestRunMountStage(t *testing.T) {
	cfg, err := configs.Parse([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	noDefault := cfg
	withDefault, err := configs.Parse([]byte(testConfig + "  default:\n    mounts: [{source: /srv/d, destination: /d}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	bidi, err := configs.Parse([]byte("runtimeClasses:\n  bidi:\n    mounts: [{source: /srv/bidi, destination: /bidi, propagation: Bidirectional}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	network, err := configs.Parse([]byte("runtimeClasses:\n  nfs:\n    mounts: [{source: \"server:/export\", destination: /data, type: nfs, propagation: rslave}]\n"))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	n := 0
	bundle := func(config string) string {
		n++
		b := filepath.Join(dir, "b"+string(rune('a'+n)))
		if err := os.Mkdir(b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b, "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		return b
	}
	state := func(bundle string, extra string) string {
		return `{"ociVersion":"1.3.0","id":"ctr1","status":"creating","pid":42,"bundle":` + quote(bundle) + extra + `}`
	}
	plain := bundle(`{"ociVersion":"1.3.0","root":{"path":"rootfs"},"mounts":[{"destination":"/proc","type":"proc","source":"proc"}],` + mountNS + `}`)
	absRoot := bundle(`{"root":{"path":"/var/lib/c/rootfs"},` + mountNS + `}`)
	crio := bundle(`{"root":{"path":"rootfs"},"annotations":{"io.kubernetes.cri-o.RuntimeHandler":"private","io.kubernetes.pod.namespace":"ns","io.kubernetes.pod.name":"pod","io.kubernetes.container.name":"app"},` + mountNS + `}`)
	notJSON := bundle("{\"root\": {\"path\": \"rootfs\"},\n")
	noMountNS := bundle(`{"root":{"path":"rootfs"},"linux":{"namespaces":[{"type":"pid"}]}}`)
	noLinux := bundle(`{"root":{"path":"rootfs"}}`)
	collision := bundle(`{"root":{"path":"rootfs"},"mounts":[{"destination":"/s","type":"bind","source":"/var/lib/kubelet/pods/x/volumes/v"}],` + mountNS + `}`)
	below := bundle(`{"root":{"path":"rootfs"},"mounts":[{"destination":"/a/b/c/d","type":"bind","source":"/pod/vol"}],` + mountNS + `}`)
	unbindable := bundle(`{"root":{"path":"rootfs"},"linux":{"rootfsPropagation":"runbindable","namespaces":[{"type":"mount"}]}}`)
	privileged := bundle(`{"root":{"path":"rootfs"},"process":{"capabilities":{"bounding":["CAP_SYS_ADMIN"]}},` + mountNS + `}`)
	sharedRoot := bundle(`{"root":{"path":"rootfs"},"linux":{"rootfsPropagation":"rshared","namespaces":[{"type":"mount"}]}}`)

	wantFast := []specmod.Mount{
		{Source: "/srv/a", Destination: "/a", Propagation: specmod.Private, ReadOnly: true},
		{Source: "/srv/s", Destination: "/s", Propagation: specmod.Shared},
		{Source: "/srv/ab", Destination: "/a/b", Propagation: specmod.Slave},
	}
	tests := []struct {
		name    string
		cfg     *configs.Config
		class   string
		trust   bool // --trust-runtime-handler-annotation
		stdin   string
		host    *specmodtest.Host
		network engine.Network
		mntErr  error
		want    *Request // nil: the mounter must not be called
		err     string
	}{
		{name: "class from the flag, mounts parents first", class: "fast", stdin: state(plain, ""),
			want: &Request{Pid: 42, Rootfs: plain + "/rootfs", Mounts: wantFast}},
		{name: "absolute root path", class: "private", stdin: state(absRoot, ""),
			want: &Request{Pid: 42, Rootfs: "/var/lib/c/rootfs", Mounts: []specmod.Mount{{Source: "/srv/p", Destination: "/p", Propagation: specmod.Private}}}},
		{name: "class from the CRI-O annotation of the spec", trust: true, stdin: state(crio, ""),
			want: &Request{Pid: 42, Rootfs: crio + "/rootfs", Mounts: []specmod.Mount{{Source: "/srv/p", Destination: "/p", Propagation: specmod.Private}}}},
		{name: "class from the CRI-O annotation of the state", trust: true, stdin: state(plain, `,"annotations":{"io.kubernetes.cri-o.RuntimeHandler":"private"}`),
			want: &Request{Pid: 42, Rootfs: plain + "/rootfs", Mounts: []specmod.Mount{{Source: "/srv/p", Destination: "/p", Propagation: specmod.Private}}}},
		{name: "default class", cfg: withDefault, class: "default", stdin: state(plain, ""),
			want: &Request{Pid: 42, Rootfs: plain + "/rootfs", Mounts: []specmod.Mount{{Source: "/srv/d", Destination: "/d", Propagation: specmod.Private}}}},
		{name: "rshared rootfs propagation is fine", class: "fast", stdin: state(sharedRoot, ""),
			want: &Request{Pid: 42, Rootfs: sharedRoot + "/rootfs", Mounts: wantFast}},
		{name: "network mount gets the prepared source", cfg: network, class: "nfs", stdin: state(plain, ""), network: fakeNetwork{source: "/run/mk/nfs/1"},
			want: &Request{Pid: 42, Rootfs: plain + "/rootfs", Mounts: []specmod.Mount{{Source: "/run/mk/nfs/1", Destination: "/data", Propagation: specmod.Slave}}}},

		{name: "rshared for a container with CAP_SYS_ADMIN", cfg: bidi, class: "bidi", stdin: state(privileged, ""),
			want: &Request{Pid: 42, Rootfs: privileged + "/rootfs", Mounts: []specmod.Mount{{Source: "/srv/bidi", Destination: "/bidi", Propagation: specmod.Shared}}}},
		{name: "rshared for an unprivileged container", cfg: bidi, class: "bidi", stdin: state(plain, ""),
			err: `mount /srv/bidi -> /bidi (rshared): rshared (Bidirectional) is for privileged containers only`},
		{name: "unknown class from the flag", class: "kata", stdin: state(plain, ""),
			err: `mountkeeper: runtime class "kata", container ctr1: the class is not in the config (the class came from --runtime-class; the config has: fast, private): hook mode is enabled per runtime class`},
		{name: "an annotation a pod can set is not trusted without the flag", cfg: withDefault, stdin: state(crio, ""),
			err: "mountkeeper: container ns/pod/app: no --runtime-class: hook mode needs it to name the runtime class (the io.kubernetes.cri-o.RuntimeHandler annotation, which a pod can set itself, is used only with --trust-runtime-handler-annotation)"},
		{name: "unknown class from the annotation", trust: true, stdin: state(plain, `,"annotations":{"io.kubernetes.cri-o.RuntimeHandler":"gvisor"}`),
			err: `runtime class "gvisor", container ctr1: the class is not in the config (the class came from annotation io.kubernetes.cri-o.RuntimeHandler;`},
		{name: "no default class", cfg: noDefault, trust: true, stdin: state(plain, ""),
			err: `runtime class "default", container ctr1: the class is not in the config (the class came from default: no --runtime-class and no io.kubernetes.cri-o.RuntimeHandler annotation; the config has: fast, private)`},
		{name: "malformed state", class: "fast", stdin: `{"pid":42,"bundle":`, err: "parse the OCI state on stdin: unexpected end of JSON input"},
		{name: "empty state", class: "fast", stdin: ``, err: "the OCI state on stdin is empty"},
		{name: "missing bundle", class: "fast", stdin: state(filepath.Join(dir, "gone"), ""),
			err: "container ctr1: the bundle " + filepath.Join(dir, "gone") + " from the OCI state does not exist"},
		{name: "config.json is not JSON", class: "fast", stdin: state(notJSON, ""),
			err: "container ctr1: " + notJSON + "/config.json: not an OCI config: unexpected end of JSON input"},
		{name: "no mount namespace", class: "fast", stdin: state(noMountNS, ""), err: `the container has no mount namespace of its own (linux.namespaces lacks "mount")`},
		{name: "no linux section", class: "fast", stdin: state(noLinux, ""), err: `the container has no mount namespace of its own`},
		{name: "destination taken by a pod volume", class: "fast", stdin: state(collision, ""),
			err: `runtime class "fast", container ctr1: mount /srv/s -> /s (rshared): the container already has a mount at /s (source "/var/lib/kubelet/pods/x/volumes/v")`},
		{name: "class mount would hide a mount the runtime made", class: "fast", stdin: state(below, ""),
			err: `mount /srv/ab -> /a/b (rslave): the container already has a mount below it, at /a/b/c/d (source "/pod/vol"): the runtime made it before the hook runs`},
		{name: "host check fails, every mount reported on one line", class: "fast", stdin: state(plain, ""),
			host: &specmodtest.Host{Fail: map[string]string{"/srv/s": "host mount point /srv is private", "/srv/ab": "source /srv/ab does not exist on the host"}},
			err:  "mount /srv/ab -> /a/b (rslave): source /srv/ab does not exist on the host; mount /srv/s -> /s (rshared): host mount point /srv is private"},
		{name: "runbindable rootfs cuts propagating mounts", class: "fast", stdin: state(unbindable, ""),
			err: `mount /srv/ab -> /a/b (rslave): linux.rootfsPropagation is "runbindable"`},
		{name: "network mount without the mounter", cfg: network, class: "nfs", stdin: state(plain, ""),
			err: `mount nfs server:/export -> /data: network filesystems are not supported here`},
		{name: "network mount the mounter cannot prepare", cfg: network, class: "nfs", stdin: state(plain, ""), network: fakeNetwork{},
			err: `mount nfs server:/export -> /data: server 10.0.0.1 does not answer`},
		{name: "mounter fails, named by Kubernetes names", trust: true, stdin: state(crio, ""), mntErr: errors.New("mount /srv/p -> /p (rprivate): destination /p: boom"),
			want: &Request{Pid: 42, Rootfs: crio + "/rootfs", Mounts: []specmod.Mount{{Source: "/srv/p", Destination: "/p", Propagation: specmod.Private}}},
			err:  `runtime class "private", container ns/pod/app: mount /srv/p -> /p (rprivate): destination /p: boom`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cfg
			if c == nil {
				c = cfg
			}
			m := &fakeMounter{err: tt.mntErr}
			var out bytes.Buffer
			err := Run(Prestart, Options{Config: c, RuntimeClass: tt.class, TrustRuntimeHandlerAnnotation: tt.trust, Host: tt.host, Network: tt.network, Mounter: m}, strings.NewReader(tt.stdin), &out)
			if out.Len() > 0 {
				t.Errorf("prestart wrote to stdout: %q", out.String())
			}
			switch {
			case tt.want == nil && m.calls > 0:
				t.Errorf("the mounter was called with %+v", *m.got)
			case tt.want != nil && m.calls != 1:
				t.Errorf("the mounter was called %d times, want once", m.calls)
			case tt.want != nil && !reflect.DeepEqual(*m.got, *tt.want):
				t.Errorf("mount request\ngot:  %+v\nwant: %+v", *m.got, *tt.want)
			}
			if tt.err == "" {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Run error\ngot:  %v\nwant: %s", err, tt.err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

func TestRunPrecreate(t *testing.T) {
	src := t.TempDir()
	cfg, err := configs.Parse([]byte("runtimeClasses:\n  fast:\n    mounts: [{source: " + src + ", destination: /data, propagation: HostToContainer}]\n  default:\n    mounts: [{source: " + src + "-default, destination: /d}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	spec := `{"ociVersion":"1.3.0","root":{"path":"rootfs"},"vendorExtension":{"keep":[1,"x"]},"linux":{"futureLinux":true},` +
		`"mounts":[{"destination":"/proc","type":"proc","source":"proc"}]}`
	tests := []struct {
		name, class, stdin string
		trust              bool
		host               *specmodtest.Host
		wantDst            []string
		wantRootfsProp     string
		err                string
	}{
		{name: "flag class added, unknown fields kept", class: "fast", stdin: spec, wantDst: []string{"/proc", "/data"}, wantRootfsProp: "rslave"},
		{name: "default class", class: "default", stdin: spec, wantDst: []string{"/proc", "/d"}},
		{name: "no class: refused", stdin: spec, err: "no --runtime-class: hook mode needs it"},
		{name: "untrusted annotation: refused", stdin: strings.Replace(spec, `"root"`, `"annotations":{"io.kubernetes.cri-o.RuntimeHandler":"fast"},"root"`, 1),
			err: "no --runtime-class: hook mode needs it"},
		{name: "class from the trusted annotation", trust: true, stdin: strings.Replace(spec, `"root"`, `"annotations":{"io.kubernetes.cri-o.RuntimeHandler":"fast"},"root"`, 1),
			wantDst: []string{"/proc", "/data"}, wantRootfsProp: "rslave"},
		{name: "unknown class", class: "kata", stdin: spec, err: `runtime class "kata", container (unnamed): the class is not in the config (the class came from --runtime-class; the config has: default, fast)`},
		{name: "not JSON", class: "fast", stdin: "{", err: "parse OCI spec: unexpected end of JSON input"},
		{name: "not JSON, unknown class: the parse error first", class: "kata", stdin: "[1]", err: "parse OCI spec: json: cannot unmarshal array"},
		{name: "host check fails as in the plugin", class: "fast", stdin: spec, host: &specmodtest.Host{Fail: map[string]string{src: "host mount point / is private"}},
			err: `mountkeeper: runtime class "fast", container (unnamed): mount ` + src + ` -> /data (rslave): host mount point / is private`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Run(Precreate, Options{Config: cfg, RuntimeClass: tt.class, TrustRuntimeHandlerAnnotation: tt.trust, Host: tt.host}, strings.NewReader(tt.stdin), &out)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Run error\ngot:  %v\nwant: %s", err, tt.err)
				}
				if out.Len() > 0 {
					t.Errorf("a failed precreate wrote %q", out.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			var doc struct {
				VendorExtension map[string]any `json:"vendorExtension"`
				Linux           struct {
					FutureLinux       bool   `json:"futureLinux"`
					RootfsPropagation string `json:"rootfsPropagation"`
				} `json:"linux"`
				Mounts []struct{ Destination string } `json:"mounts"`
			}
			if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out.String())
			}
			var dst []string
			for _, m := range doc.Mounts {
				dst = append(dst, m.Destination)
			}
			if !reflect.DeepEqual(dst, tt.wantDst) {
				t.Errorf("mounts %q, want %q", dst, tt.wantDst)
			}
			if doc.VendorExtension == nil || !doc.Linux.FutureLinux {
				t.Errorf("unknown fields lost:\n%s", out.String())
			}
			if doc.Linux.RootfsPropagation != tt.wantRootfsProp {
				t.Errorf("rootfsPropagation %q, want %q", doc.Linux.RootfsPropagation, tt.wantRootfsProp)
			}
		})
	}
}

func TestMountAttr(t *testing.T) {
	tests := []struct {
		name string
		m    specmod.Mount
		want string // set/clr/propagation as flag names
		err  string
	}{
		{name: "private", m: specmod.Mount{Propagation: specmod.Private}, want: "set= clr= prop=private"},
		{name: "slave read-only", m: specmod.Mount{Propagation: specmod.Slave, ReadOnly: true}, want: "set=rdonly clr= prop=slave"},
		{name: "shared with flags", m: specmod.Mount{Propagation: specmod.Shared, Options: []string{"nosuid", "nodev", "noexec"}}, want: "set=nosuid,nodev,noexec clr= prop=shared"},
		{name: "later option wins", m: specmod.Mount{Propagation: specmod.Private, Options: []string{"nosuid", "suid", "exec"}}, want: "set= clr=nosuid,noexec prop=private"},
		{name: "atime mode", m: specmod.Mount{Propagation: specmod.Private, Options: []string{"noatime", "nodiratime"}}, want: "set=nodiratime,noatime clr=atime-mask prop=private"},
		{name: "atime negation cancels", m: specmod.Mount{Propagation: specmod.Private, Options: []string{"strictatime", "nostrictatime"}}, want: "set= clr= prop=private"},
		{name: "negation alone keeps the source's mode", m: specmod.Mount{Propagation: specmod.Private, Options: []string{"norelatime"}}, want: "set= clr= prop=private"},
		{name: "relatime", m: specmod.Mount{Propagation: specmod.Private, Options: []string{"noatime", "relatime"}}, want: "set= clr=atime-mask prop=private"},
		{name: "unknown option", m: specmod.Mount{Propagation: specmod.Private, Options: []string{"size=1m"}}, err: `option "size=1m" is not a bind mount option`},
		{name: "unknown propagation", m: specmod.Mount{Propagation: "shared"}, err: `unknown propagation "shared"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := mountAttr(tt.m)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("mountAttr error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := describeMountAttr(a.Attr_set, a.Attr_clr, a.Propagation); got != tt.want {
				t.Errorf("mountAttr(%v) = %s, want %s", tt.m, got, tt.want)
			}
		})
	}
}

// describeMountAttr names mount_setattr attributes for readable test expectations.
func describeMountAttr(set, clr, prop uint64) string {
	names := []struct {
		bit  uint64
		name string
	}{
		{unix.MOUNT_ATTR_RDONLY, "rdonly"}, {unix.MOUNT_ATTR_NOSUID, "nosuid"}, {unix.MOUNT_ATTR_NODEV, "nodev"},
		{unix.MOUNT_ATTR_NOEXEC, "noexec"}, {unix.MOUNT_ATTR_NODIRATIME, "nodiratime"},
	}
	list := func(v uint64, withMask bool) string {
		var out []string
		for _, n := range names {
			if v&n.bit != 0 {
				out = append(out, n.name)
			}
		}
		switch {
		case withMask && v&unix.MOUNT_ATTR__ATIME == unix.MOUNT_ATTR__ATIME:
			out = append(out, "atime-mask")
		case v&unix.MOUNT_ATTR__ATIME == unix.MOUNT_ATTR_NOATIME:
			out = append(out, "noatime")
		case v&unix.MOUNT_ATTR__ATIME == unix.MOUNT_ATTR_STRICTATIME:
			out = append(out, "strictatime")
		}
		return strings.Join(out, ",")
	}
	props := map[uint64]string{unix.MS_PRIVATE: "private", unix.MS_SLAVE: "slave", unix.MS_SHARED: "shared"}
	return "set=" + list(set, false) + " clr=" + list(clr, true) + " prop=" + props[prop]
}
