package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// fakeNetwork hands out /net/<source> as the host path of a network filesystem, or fails the
// sources in fail, and records who claimed what and who was released.
type fakeNetwork struct {
	fail     map[string]string
	claims   []string // "user source"
	released []string
}

func (n *fakeNetwork) HostPath(_ context.Context, s netspec.Spec, user string) (string, error) {
	n.claims = append(n.claims, user+" "+s.Source)
	if why, ok := n.fail[s.Source]; ok {
		return "", errors.New(why)
	}
	return "/net/" + strings.ReplaceAll(s.Source, ":", ""), nil
}

func (n *fakeNetwork) Release(user string) { n.released = append(n.released, user) }

// fakeSubPaths repairs every source it is given, or fails with err, or (fallback) leaves
// each as it is.
type fakeSubPaths struct {
	err      error
	fallback bool
	sources  []string
}

func (f *fakeSubPaths) RepairSources(sources []string) ([]subpath.Repair, []subpath.Fallback, error) {
	f.sources = append(f.sources, sources...)
	if f.err != nil {
		return nil, nil, f.err
	}
	var rs []subpath.Repair
	var fs []subpath.Fallback
	for _, s := range sources {
		if f.fallback {
			fs = append(fs, subpath.Fallback{Target: subpath.Target{Path: s}, Reason: subpath.ReasonUnknownVolume, Err: errors.New("no volume")})
			continue
		}
		rs = append(rs, subpath.Repair{Target: subpath.Target{Path: s}})
	}
	return rs, fs, nil
}

const testConfig = `
runtimeClasses:
  plain:
    mounts:
      - {source: /srv/bc, destination: /b/c, propagation: rslave}
      - {source: /srv/a, destination: /a}
      - {source: /srv/b, destination: /b, readOnly: true}
  bidi:
    mounts:
      - {source: /srv/bidi, destination: /bidi, propagation: Bidirectional}
      - {source: /srv/bidi-slave, destination: /bidi-slave, propagation: rslave}
  bidi-open:
    allowBidirectionalForUnprivileged: true
    mounts:
      - {source: /srv/bidi-open, destination: /bidi, propagation: rshared}
  net:
    mounts:
      - {type: nfs, source: "filer:/export", destination: /data, propagation: HostToContainer}
      - {source: /srv/n, destination: /a}
`

const (
	subPathTarget = "/var/lib/kubelet/pods/uid-1/volume-subpaths/cfg/app/0"
	prefix        = `mountkeeper: runtime class "plain", container ns/pod/app: `
	netPrefix     = `mountkeeper: runtime class "net", container ns/pod/app: `
)

var (
	ctr = engine.Container{Namespace: "ns", Pod: "pod", Name: "app", ID: "ctr-1"}
	// kubelet's mounts of a container with a subPath: only the first is a subPath bind target.
	kubeletMounts = []oci.Mount{
		{Source: subPathTarget, Destination: "/etc/app.conf"},
		{Source: "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~configmap/cfg", Destination: "/cfg"},
		{Source: "/var/lib/kubelet/pods/uid-1/volume-subpaths/cfg/app/x", Destination: "/x"},
		{Source: "/var/lib/kubelet/pods/uid-1/etc-hosts", Destination: "/etc/hosts"},
	}
)

func TestDecide(t *testing.T) {
	cfg, err := configs.Parse([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		req       engine.Request // Container defaults to ctr
		hostFail  map[string]string
		netFail   map[string]string
		noNetwork bool
		subPaths  bool
		subErr    error
		// subFallback: the subPaths keep kubelet's binds (wantFallbacks lists them).
		subFallback   bool
		wantFallbacks []string

		wantConfigured bool
		wantMounts     []string // specmod.Mount.String()
		wantErr        string   // the whole message
		wantErrHas     string   // or a part of it, after the prefix
		wantAsked      []string // sources the host was asked about
		wantRepaired   []string
	}{{
		name: "unknown class: no mounts, no error",
		req:  engine.Request{Handler: "kata"},
	}, {
		name:           "configured class: mounts in config order",
		req:            engine.Request{Handler: "plain", Mounts: kubeletMounts},
		wantConfigured: true,
		wantMounts:     []string{"/srv/bc -> /b/c (rslave)", "/srv/a -> /a (rprivate)", "/srv/b -> /b (rprivate, ro)"},
		wantAsked:      []string{"/srv/bc", "/srv/a", "/srv/b"},
	}, {
		name:           "network class: the host path stands in for the source",
		req:            engine.Request{Handler: "net"},
		wantConfigured: true,
		wantMounts:     []string{"/net/filer/export -> /data (rslave)", "/srv/n -> /a (rprivate)"},
		wantAsked:      []string{"/net/filer/export", "/srv/n"},
	}, {
		name:           "host check fails: one line, network claim released",
		req:            engine.Request{Handler: "net"},
		hostFail:       map[string]string{"/srv/n": "source /srv/n does not exist on the host"},
		wantConfigured: true,
		wantErr:        netPrefix + "mount /srv/n -> /a (rprivate): source /srv/n does not exist on the host",
		wantAsked:      []string{"/net/filer/export", "/srv/n"},
	}, {
		name:           "every host failure, joined on one line",
		req:            engine.Request{Handler: "plain"},
		hostFail:       map[string]string{"/srv/a": "missing", "/srv/bc": "private"},
		wantConfigured: true,
		wantErr:        prefix + "mount /srv/bc -> /b/c (rslave): private; mount /srv/a -> /a (rprivate): missing",
		wantAsked:      []string{"/srv/bc", "/srv/a", "/srv/b"},
	}, {
		name:           "network mount fails",
		req:            engine.Request{Handler: "net"},
		netFail:        map[string]string{"filer:/export": "not ready: last error: connection refused"},
		wantConfigured: true,
		wantErr:        netPrefix + "mount nfs filer:/export -> /data: not ready: last error: connection refused",
	}, {
		name:           "network class without a Network",
		req:            engine.Request{Handler: "net"},
		noNetwork:      true,
		wantConfigured: true,
		wantErr:        netPrefix + "mount nfs filer:/export -> /data: network filesystems are not supported here",
	}, {
		name:           "in container without a mount namespace",
		req:            engine.Request{Handler: "plain", Stage: engine.InContainer},
		wantConfigured: true,
		wantErrHas:     "the container has no mount namespace of its own",
	}, {
		name: "in container: a spec mount below a class mount would be hidden",
		req: engine.Request{Handler: "plain", Stage: engine.InContainer, MountNamespace: true,
			Mounts: []oci.Mount{{Source: "/vol", Destination: "/a/sub"}}},
		wantConfigured: true,
		wantErrHas:     "mount /srv/a -> /a (rprivate): the container already has a mount below it, at /a/sub",
		wantAsked:      []string{"/srv/bc", "/srv/a", "/srv/b"},
	}, {
		name: "in container: a spec mount below a class mount, spelled unclean, would be hidden",
		req: engine.Request{Handler: "plain", Stage: engine.InContainer, MountNamespace: true,
			Mounts: []oci.Mount{{Source: "/vol", Destination: "a//sub/."}}},
		wantConfigured: true,
		wantErrHas:     "mount /srv/a -> /a (rprivate): the container already has a mount below it, at a//sub/.",
		wantAsked:      []string{"/srv/bc", "/srv/a", "/srv/b"},
	}, {
		name: "in container: a spec mount at a class destination, spelled unclean, collides",
		req: engine.Request{Handler: "plain", Stage: engine.InContainer, MountNamespace: true,
			Mounts: []oci.Mount{{Source: "/vol", Destination: "//a/"}}},
		wantConfigured: true,
		wantErrHas:     `mount /srv/a -> /a (rprivate): the container already has a mount at //a/ (source "/vol")`,
		wantAsked:      []string{"/srv/bc", "/srv/b"},
	}, {
		// Kubernetes gives Bidirectional to privileged containers only: a mount an
		// unprivileged container makes (root in its own user namespace) would reach the host.
		name:           "rshared for an unprivileged container: refused, naming the mount, the reason and the fix",
		req:            engine.Request{Handler: "bidi"},
		wantConfigured: true,
		wantErr: `mountkeeper: runtime class "bidi", container ns/pod/app: mount /srv/bidi -> /bidi (rshared): rshared (Bidirectional) is for privileged containers only, as in Kubernetes, ` +
			`and this container is not privileged: a mount it made below /bidi would appear on the host; run the container privileged, use rslave (HostToContainer), ` +
			`or set allowBidirectionalForUnprivileged: true on runtime class "bidi" to allow it for every container of the class`,
		wantAsked: []string{"/srv/bidi-slave"},
	}, {
		name:           "rshared for a privileged container",
		req:            engine.Request{Handler: "bidi", Privileged: true},
		wantConfigured: true,
		wantMounts:     []string{"/srv/bidi -> /bidi (rshared)", "/srv/bidi-slave -> /bidi-slave (rslave)"},
		wantAsked:      []string{"/srv/bidi", "/srv/bidi-slave"},
	}, {
		name:           "rshared for an unprivileged container of a class that allows it",
		req:            engine.Request{Handler: "bidi-open"},
		wantConfigured: true,
		wantMounts:     []string{"/srv/bidi-open -> /bidi (rshared)"},
		wantAsked:      []string{"/srv/bidi-open"},
	}, {
		name: "in container: runbindable rootfs cuts rslave",
		req: engine.Request{Handler: "plain", Stage: engine.InContainer, MountNamespace: true,
			RootfsPropagation: "runbindable"},
		wantConfigured: true,
		wantErrHas:     `mount /srv/bc -> /b/c (rslave): linux.rootfsPropagation is "runbindable"`,
		wantAsked:      []string{"/srv/bc", "/srv/a", "/srv/b"},
	}, {
		name: "in container: parents first",
		req: engine.Request{Handler: "plain", Stage: engine.InContainer, MountNamespace: true,
			RootfsPropagation: "rslave"},
		wantConfigured: true,
		wantMounts:     []string{"/srv/a -> /a (rprivate)", "/srv/b -> /b (rprivate, ro)", "/srv/bc -> /b/c (rslave)"},
		wantAsked:      []string{"/srv/bc", "/srv/a", "/srv/b"},
	}, {
		name:         "before create: only kubelet subPath targets are repaired, whatever the class",
		req:          engine.Request{Handler: "kata", Mounts: kubeletMounts},
		subPaths:     true,
		wantRepaired: []string{subPathTarget},
	}, {
		name:     "a subPath left without kubelet's bind refuses even an unknown class",
		req:      engine.Request{Handler: "kata", Mounts: kubeletMounts},
		subPaths: true, subErr: fmt.Errorf("repair subPath mount: %w", subpath.ErrNotMounted),
		wantErr: `mountkeeper: runtime class "kata", container ns/pod/app: repair subPath mount: ` + subpath.ErrNotMounted.Error(),
	}, {
		name:     "a subPath that cannot be repaired keeps kubelet's bind: not refused",
		req:      engine.Request{Handler: "kata", Mounts: kubeletMounts},
		subPaths: true, subFallback: true,
		wantFallbacks: []string{subPathTarget},
	}, {
		name:     "in container: no repair",
		req:      engine.Request{Handler: "kata", Mounts: kubeletMounts, Stage: engine.InContainer},
		subPaths: true,
	}, {
		name: "no SubPaths: no repair",
		req:  engine.Request{Handler: "kata", Mounts: kubeletMounts},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			host := &specmodtest.Host{Fail: tc.hostFail}
			net := &fakeNetwork{fail: tc.netFail}
			sub := &fakeSubPaths{err: tc.subErr, fallback: tc.subFallback}
			e := &engine.Engine{Config: cfg, Host: host}
			if !tc.noNetwork {
				e.Network = net
			}
			if tc.subPaths {
				e.SubPaths = sub
			}
			req := tc.req
			if req.Container == (engine.Container{}) {
				req.Container = ctr
			}

			d, err := e.Decide(context.Background(), req)

			if d.Class != configs.ClassName(req.Handler) || d.Configured != tc.wantConfigured {
				t.Errorf("class %q configured %v, want %q %v", d.Class, d.Configured, configs.ClassName(req.Handler), tc.wantConfigured)
			}
			switch {
			case tc.wantErr == "" && tc.wantErrHas == "":
				if err != nil {
					t.Fatalf("Decide: %v", err)
				}
			case err == nil:
				t.Fatalf("Decide succeeded with %v, want an error", d.Mounts)
			default:
				var refusal *engine.Error
				if !errors.As(err, &refusal) {
					t.Errorf("error %T is not a *engine.Error", err)
				}
				msg := err.Error()
				if strings.Contains(msg, "\n") {
					t.Errorf("message spans lines: %q", msg)
				}
				if tc.wantErr != "" && msg != tc.wantErr {
					t.Errorf("error\n got %s\nwant %s", msg, tc.wantErr)
				}
				if tc.wantErrHas != "" && (!strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.wantErrHas)) {
					t.Errorf("error %q lacks %q", msg, prefix+"..."+tc.wantErrHas)
				}
				if d.Mounts != nil {
					t.Errorf("a refusal carries mounts: %v", d.Mounts)
				}
			}
			var got []string
			for _, m := range d.Mounts {
				got = append(got, m.String())
			}
			if !slices.Equal(got, tc.wantMounts) {
				t.Errorf("mounts\n got %q\nwant %q", got, tc.wantMounts)
			}
			if asked := host.Asked(); !slices.Equal(asked, tc.wantAsked) {
				t.Errorf("host asked about %q, want %q", asked, tc.wantAsked)
			}
			// A refusal holds no claim on a network mount; a decision keeps its claims.
			switch {
			case err == nil && len(net.released) > 0:
				t.Errorf("a decision released its claims: %q", net.released)
			case err != nil && len(net.claims) > 0 && !slices.Equal(net.released, []string{req.Container.ID}):
				t.Errorf("a refusal after claims %q released %q, want %s", net.claims, net.released, req.Container.ID)
			}
			for _, c := range net.claims {
				if !strings.HasPrefix(c, req.Container.ID+" ") {
					t.Errorf("network claim %q is not the container's", c)
				}
			}
			var repaired []string
			for _, r := range d.Repairs {
				repaired = append(repaired, r.Target.Path)
			}
			if !slices.Equal(repaired, tc.wantRepaired) {
				t.Errorf("repairs %q, want %q", repaired, tc.wantRepaired)
			}
			var fellBack []string
			for _, f := range d.Fallbacks {
				fellBack = append(fellBack, f.Target.Path)
			}
			if !slices.Equal(fellBack, tc.wantFallbacks) {
				t.Errorf("fallbacks %q, want %q", fellBack, tc.wantFallbacks)
			}
			if tc.subErr == nil && !tc.subFallback && !slices.Equal(sub.sources, tc.wantRepaired) {
				t.Errorf("asked to repair %q, want %q", sub.sources, tc.wantRepaired)
			}
		})
	}
}

func TestRefuseKeepsARefusal(t *testing.T) {
	first := engine.Refuse("plain", ctr, errors.New("source missing"))
	if got := engine.Refuse("other", engine.Container{Name: "x"}, first); got != first {
		t.Errorf("Refuse(refusal) = %v, want it unchanged: %v", got, first)
	}
	wrapped := fmt.Errorf("render: %w", first)
	if got := engine.Refuse("other", ctr, wrapped); got != wrapped {
		t.Errorf("Refuse(wrapped refusal) = %v, want it unchanged", got)
	}
	if got, want := first.Error(), prefix+"source missing"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := engine.Refuse("", ctr, errors.New("x")).Error(); !strings.HasPrefix(got, `mountkeeper: runtime class "default", `) {
		t.Errorf("the default handler's refusal = %q", got)
	}
}

func TestContainerString(t *testing.T) {
	for _, tc := range []struct {
		c    engine.Container
		want string
	}{
		{engine.Container{Namespace: "ns", Pod: "pod", Name: "app", ID: "abc"}, "ns/pod/app"},
		{engine.Container{Name: "app", ID: "abc"}, "app"},
		{engine.Container{Namespace: "ns", Pod: "pod", ID: "abc"}, "ns/pod/abc"},
		{engine.Container{ID: "abc"}, "abc"},
		{engine.Container{}, "(unnamed)"},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.c, got, tc.want)
		}
	}
}

func TestPrivileged(t *testing.T) {
	sysfs := func(opts ...string) []oci.Mount {
		return []oci.Mount{{Destination: "/proc", Type: "proc"}, {Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: append([]string{"nosuid"}, opts...)}}
	}
	all := &oci.Process{Capabilities: &oci.LinuxCapabilities{Bounding: []string{"CAP_CHOWN", "CAP_SYS_ADMIN"}}}
	some := &oci.Process{Capabilities: &oci.LinuxCapabilities{Bounding: []string{"CAP_CHOWN", "CAP_NET_BIND_SERVICE"}}}
	userns := []oci.LinuxNamespace{{Type: oci.MountNamespace}, {Type: oci.UserNamespace}}
	for _, tt := range []struct {
		name string
		spec oci.Spec
		want bool
	}{
		{name: "CAP_SYS_ADMIN", spec: oci.Spec{Process: all}, want: true},
		{name: "no CAP_SYS_ADMIN", spec: oci.Spec{Process: some}},
		{name: "no process", spec: oci.Spec{}},
		{name: "CAP_SYS_ADMIN in a user namespace", spec: oci.Spec{Process: all, Linux: &oci.Linux{Namespaces: userns}}},
	} {
		if got := engine.PrivilegedSpec(&tt.spec); got != tt.want {
			t.Errorf("%s: PrivilegedSpec = %v, want %v", tt.name, got, tt.want)
		}
	}
	// Over NRI there are no capabilities: the runtimes mount sysfs read-write for privileged
	// containers only.
	for _, tt := range []struct {
		name   string
		mounts []oci.Mount
		userns bool
		want   bool
	}{
		{name: "sysfs rw", mounts: sysfs("rw"), want: true},
		{name: "sysfs without ro", mounts: sysfs(), want: true},
		{name: "sysfs ro", mounts: sysfs("ro")},
		{name: "no sysfs", mounts: sysfs()[:1]},
		{name: "sysfs rw in a user namespace", mounts: sysfs("rw"), userns: true},
	} {
		if got := engine.PrivilegedMounts(tt.mounts, tt.userns); got != tt.want {
			t.Errorf("%s: PrivilegedMounts = %v, want %v", tt.name, got, tt.want)
		}
	}
}
