package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/idmap"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// fakeIdmap answers as the kernel would for the filesystem types in fs (source -> type):
// a source listed there cannot be idmapped.
type fakeIdmap struct {
	fs      map[string]string
	noTmpfs bool // a kernel before Linux 6.3: no tmpfs can be idmapped
	asked   []string
}

func (f *fakeIdmap) CheckTmpfs() error {
	if f.noTmpfs {
		return &idmap.NotSupportedError{Source: "a new tmpfs", FSType: "tmpfs", Err: unix.EINVAL}
	}
	return nil
}

func (f *fakeIdmap) Check(source string) error {
	f.asked = append(f.asked, source)
	if t, ok := f.fs[source]; ok {
		return &idmap.NotSupportedError{Source: source, FSType: t, Err: unix.EINVAL}
	}
	return nil
}

const usernsConfig = `
runtimeClasses:
  uns:
    allowBidirectionalForUnprivileged: true
    mounts:
      - {source: /srv/priv, destination: /priv}
      - {source: /srv/slave, destination: /slave, propagation: HostToContainer, readOnly: true}
  fuse:
    mounts:
      - {type: fuse.sshfs, source: "root@h:/x", destination: /ssh, propagation: rslave}
  fuse-ok:
    mounts:
      - {type: fuse.sshfs, source: "root@h:/x", destination: /ssh, propagation: rslave, allowWithoutIdmap: true}
      - {source: /srv/p2, destination: /p2}
  bidi:
    allowBidirectionalForUnprivileged: true
    mounts:
      - {source: /srv/bidi, destination: /bidi, propagation: Bidirectional}
`

func TestDecideUserNamespace(t *testing.T) {
	cfg, err := configs.Parse([]byte(usernsConfig))
	if err != nil {
		t.Fatal(err)
	}
	fuseHost := "/net/root@h/x" // fakeNetwork.s host path of root@h:/x
	for _, tc := range []struct {
		name       string
		req        engine.Request
		wantMounts []string
		wantOCI    [][]string // options of each mount as the runtime gets them
		wantErr    string     // the whole refusal
		wantAsked  []string   // sources the kernel was asked about
	}{{
		name:       "user namespace: bind mounts idmapped",
		req:        engine.Request{Handler: "uns", UserNamespace: true},
		wantMounts: []string{"/srv/priv -> /priv (rprivate, idmap)", "/srv/slave -> /slave (rslave, ro, idmap)"},
		wantOCI:    [][]string{{"rbind", "rprivate", "idmap"}, {"rbind", "rslave", "ro", "idmap"}},
		wantAsked:  []string{"/srv/priv", "/srv/slave"},
	}, {
		name:       "no user namespace: unchanged, the kernel not asked",
		req:        engine.Request{Handler: "uns"},
		wantMounts: []string{"/srv/priv -> /priv (rprivate)", "/srv/slave -> /slave (rslave, ro)"},
		wantOCI:    [][]string{{"rbind", "rprivate"}, {"rbind", "rslave", "ro"}},
	}, {
		name:      "a filesystem that cannot be idmapped: refused, naming the mount, the filesystem and the fix",
		req:       engine.Request{Handler: "fuse", UserNamespace: true},
		wantErr:   `mountkeeper: runtime class "fuse", container ns/pod/app: mount /net/root@h/x -> /ssh (rslave): fuse.sshfs root@h:/x -o allow_other,default_permissions: its fuse.sshfs filesystem cannot be idmapped (the kernel answers EINVAL to MOUNT_ATTR_IDMAP), and the container has a user namespace (hostUsers: false), in which every file would show as owned by 65534 (nobody) and access be checked by host uids: run the pod with hostUsers: true, or set allowWithoutIdmap: true on this mount (runtime class "fuse", mount 1) to pass it un-idmapped`,
		wantAsked: []string{fuseHost},
	}, {
		name:       "allowWithoutIdmap: passed un-idmapped, the other mount idmapped",
		req:        engine.Request{Handler: "fuse-ok", UserNamespace: true},
		wantMounts: []string{"/net/root@h/x -> /ssh (rslave)", "/srv/p2 -> /p2 (rprivate, idmap)"},
		wantOCI:    [][]string{{"rbind", "rslave"}, {"rbind", "rprivate", "idmap"}},
		wantAsked:  []string{fuseHost, "/srv/p2"},
	}, {
		name:       "no user namespace: a FUSE mount passes, the kernel not asked",
		req:        engine.Request{Handler: "fuse"},
		wantMounts: []string{"/net/root@h/x -> /ssh (rslave)"},
		wantOCI:    [][]string{{"rbind", "rslave"}},
	}, {
		name:    "rshared in a user namespace: refused naming it, whatever the class allows",
		req:     engine.Request{Handler: "bidi", UserNamespace: true},
		wantErr: `mountkeeper: runtime class "bidi", container ns/pod/app: mount /srv/bidi -> /bidi (rshared): rshared (Bidirectional) is refused for a container with a user namespace (hostUsers: false), whatever allowBidirectionalForUnprivileged says: its mounts would propagate to the host from a namespace the host does not control; use rslave (HostToContainer), or run the pod with hostUsers: true`,
	}, {
		name:       "rshared without a user namespace: the class's opt-in holds",
		req:        engine.Request{Handler: "bidi"},
		wantMounts: []string{"/srv/bidi -> /bidi (rshared)"},
		wantOCI:    [][]string{{"rbind", "rshared"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			im := &fakeIdmap{fs: map[string]string{fuseHost: "fuse.sshfs"}}
			e := &engine.Engine{Config: cfg, Host: &specmodtest.Host{}, Network: &fakeNetwork{}, Idmap: im}
			tc.req.Container = ctr
			d, err := e.Decide(context.Background(), tc.req)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error:\n got %v\nwant %s", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Error("the refusal has more than one line")
				}
			} else if err != nil {
				t.Fatal(err)
			}
			var got []string
			var gotOCI [][]string
			for _, m := range d.Mounts {
				got = append(got, m.String())
				gotOCI = append(gotOCI, m.OCI().Options)
			}
			if !slices.Equal(got, tc.wantMounts) {
				t.Errorf("mounts %q, want %q", got, tc.wantMounts)
			}
			if !slices.EqualFunc(gotOCI, tc.wantOCI, slices.Equal) {
				t.Errorf("OCI options %q, want %q", gotOCI, tc.wantOCI)
			}
			if !slices.Equal(im.asked, tc.wantAsked) {
				t.Errorf("the kernel was asked about %q, want %q", im.asked, tc.wantAsked)
			}
		})
	}
}
