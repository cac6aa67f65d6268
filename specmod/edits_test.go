package specmod_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/specmod"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

func mnt(src, dst string, p specmod.Propagation) specmod.Mount {
	return specmod.Mount{Source: src, Destination: dst, Propagation: p}
}

func TestVerify(t *testing.T) {
	podVolume := oci.Mount{Destination: "/data", Type: "bind", Source: "/var/lib/kubelet/pods/uid/volumes/kubernetes.io~empty-dir/data"}
	tests := []struct {
		name      string
		mounts    []specmod.Mount
		existing  []oci.Mount
		fail      map[string]string // host failures by source
		want      []string          // substrings of the error, each; nil: no error
		wantCalls [][]string        // sources the host was asked about, per call
	}{
		{
			name: "no mounts: host not asked",
		},
		{
			name:      "valid mounts are checked on the host in order",
			mounts:    []specmod.Mount{mnt("/srv/a", "/a", specmod.Private), mnt("/srv/b", "/b", specmod.Slave)},
			existing:  []oci.Mount{{Destination: "/etc/hosts", Source: "/x/hosts"}},
			wantCalls: [][]string{{"/srv/a", "/srv/b"}},
		},
		{
			name:      "nested destinations are fine",
			mounts:    []specmod.Mount{mnt("/srv/a", "/a", specmod.Shared), mnt("/srv/ab", "/a/b", specmod.Slave)},
			existing:  []oci.Mount{{Destination: "/a/b/c", Source: "/x"}, {Destination: "/", Source: "rootfs"}},
			wantCalls: [][]string{{"/srv/a", "/srv/ab"}},
		},
		{
			name:     "collision with a container mount names its source",
			mounts:   []specmod.Mount{mnt("/srv/data", "/data", specmod.Slave), mnt("/srv/b", "/b", specmod.Private)},
			existing: []oci.Mount{podVolume},
			want: []string{
				`mount /srv/data -> /data (rslave): the container already has a mount at /data (source "` + podVolume.Source + `"): remove it from the pod spec or choose another destination for the class mount`,
			},
			wantCalls: [][]string{{"/srv/b"}},
		},
		{
			name: "collision spelled differently: /data/, /data/. and //data are /data",
			mounts: []specmod.Mount{mnt("/srv/a", "/a", specmod.Slave), mnt("/srv/b", "/b", specmod.Slave),
				mnt("/srv/c", "/c", specmod.Slave), mnt("/srv/ok", "/ok", specmod.Slave)},
			existing: []oci.Mount{{Destination: "/a/", Source: "/pod/a"}, {Destination: "/b/.", Source: "/pod/b"}, {Destination: "//c", Source: "/pod/c"}},
			want: []string{
				`mount /srv/a -> /a (rslave): the container already has a mount at /a/ (source "/pod/a")`,
				`mount /srv/b -> /b (rslave): the container already has a mount at /b/. (source "/pod/b")`,
				`mount /srv/c -> /c (rslave): the container already has a mount at //c (source "/pod/c")`,
			},
			wantCalls: [][]string{{"/srv/ok"}},
		},
		{
			name:      "duplicate destination within the edits",
			mounts:    []specmod.Mount{mnt("/srv/a", "/d", specmod.Private), mnt("/srv/b", "/d", specmod.Shared)},
			want:      []string{"mount /srv/b -> /d (rshared): another class mount already uses this destination"},
			wantCalls: [][]string{{"/srv/a"}},
		},
		{
			name:      "invalid mount is reported and not checked on the host",
			mounts:    []specmod.Mount{mnt("srv/rel", "/rel", specmod.Slave), mnt("/srv/ok", "/ok", specmod.Slave)},
			want:      []string{`mount srv/rel -> /rel (rslave): source "srv/rel" is not an absolute path`},
			wantCalls: [][]string{{"/srv/ok"}},
		},
		{
			name:   "only invalid mounts: host not asked at all",
			mounts: []specmod.Mount{mnt("/srv/a", "/proc/x", specmod.Private), mnt("/srv/b", "/b", "shared")},
			want: []string{
				`destination "/proc/x" is inside /proc or /sys`,
				`unknown propagation "shared"`,
			},
		},
		{
			name:      "host errors are passed through",
			mounts:    []specmod.Mount{mnt("/srv/a", "/a", specmod.Private), mnt("/srv/b", "/b", specmod.Shared)},
			fail:      map[string]string{"/srv/b": "host mount point /srv is private"},
			want:      []string{"mount /srv/b -> /b (rshared): host mount point /srv is private"},
			wantCalls: [][]string{{"/srv/a", "/srv/b"}},
		},
		{
			name:     "every problem is reported together",
			mounts:   []specmod.Mount{mnt("/srv/a", "/data", specmod.Private), mnt("/srv/b", "/b", specmod.Private), mnt("/srv/c", "/b", specmod.Private), mnt("/srv/d", "/", specmod.Private), mnt("/srv/e", "/e", specmod.Slave)},
			existing: []oci.Mount{podVolume},
			fail:     map[string]string{"/srv/e": "source /srv/e does not exist"},
			want: []string{
				"mount /srv/a -> /data (rprivate): the container already has a mount at /data",
				"mount /srv/c -> /b (rprivate): another class mount already uses this destination",
				`mount /srv/d -> / (rprivate): destination "/" would hide`,
				"mount /srv/e -> /e (rslave): source /srv/e does not exist",
			},
			wantCalls: [][]string{{"/srv/b", "/srv/e"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &specmodtest.Host{Fail: tt.fail}
			err := validateAndVerify(tt.mounts, tt.existing, h)
			if !reflect.DeepEqual(h.Calls(), tt.wantCalls) {
				t.Errorf("host was asked about %q, want %q", h.Calls(), tt.wantCalls)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Verify accepted the edits, want an error containing %q", tt.want)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Verify error\ngot:  %s\nwant it to contain: %s", err, want)
				}
			}
			var me *specmod.MountError
			if !errors.As(err, &me) {
				t.Errorf("Verify error %q holds no *specmod.MountError", err)
			}
		})
	}
}

// validateAndVerify does what a loader and then Verify do: mounts that fail Mount.Validate are
// refused there (a config is, at load) and never reach Verify or the host.
func validateAndVerify(mounts []specmod.Mount, existing []oci.Mount, host specmod.Host) error {
	var errs []error
	valid := make([]specmod.Mount, 0, len(mounts))
	for _, m := range mounts {
		if err := m.Validate(); err != nil {
			errs = append(errs, &specmod.MountError{Mount: m, Err: err})
			continue
		}
		valid = append(valid, m)
	}
	return errors.Join(append(errs, specmod.Edits{Mounts: valid}.Verify(existing, host))...)
}

func TestVerifyNilHost(t *testing.T) {
	e := specmod.Edits{Mounts: []specmod.Mount{mnt("/srv/a", "/a", specmod.Slave)}}
	if err := e.Verify(nil, nil); err != nil {
		t.Errorf("Verify with no host: %v", err)
	}
	bad := specmod.Edits{Mounts: []specmod.Mount{mnt("/srv/a", "/a", specmod.Slave)}}
	err := bad.Verify([]oci.Mount{{Destination: "/a", Source: "/pod"}}, nil)
	if err == nil || !strings.Contains(err.Error(), `the container already has a mount at /a (source "/pod")`) {
		t.Errorf("Verify with no host = %v, want the collision still reported", err)
	}
}

func TestRootfsPropagation(t *testing.T) {
	tests := []struct {
		name    string
		current string
		mounts  []specmod.Propagation
		want    string
	}{
		{name: "no mounts keep empty", current: "", want: ""},
		{name: "no mounts keep current", current: "rslave", want: "rslave"},
		{name: "private mounts change nothing", current: "", mounts: []specmod.Propagation{specmod.Private, specmod.Private}, want: ""},
		{name: "private mounts keep rprivate", current: "rprivate", mounts: []specmod.Propagation{specmod.Private}, want: "rprivate"},
		{name: "slave raises empty", current: "", mounts: []specmod.Propagation{specmod.Slave}, want: "rslave"},
		{name: "slave raises rprivate", current: "rprivate", mounts: []specmod.Propagation{specmod.Slave}, want: "rslave"},
		{name: "slave raises private", current: "private", mounts: []specmod.Propagation{specmod.Slave}, want: "rslave"},
		{name: "slave keeps rslave", current: "rslave", mounts: []specmod.Propagation{specmod.Slave}, want: "rslave"},
		{name: "slave never lowers rshared", current: "rshared", mounts: []specmod.Propagation{specmod.Slave}, want: "rshared"},
		{name: "private never lowers rshared", current: "rshared", mounts: []specmod.Propagation{specmod.Private}, want: "rshared"},
		{name: "shared raises empty", current: "", mounts: []specmod.Propagation{specmod.Shared}, want: "rshared"},
		{name: "shared raises rslave", current: "rslave", mounts: []specmod.Propagation{specmod.Shared}, want: "rshared"},
		{name: "slave after shared stays rshared", current: "", mounts: []specmod.Propagation{specmod.Shared, specmod.Slave}, want: "rshared"},
		{name: "shared after slave is rshared", current: "", mounts: []specmod.Propagation{specmod.Slave, specmod.Shared, specmod.Private}, want: "rshared"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ms []specmod.Mount
			for i, p := range tt.mounts {
				ms = append(ms, mnt("/srv", "/m"+string(rune('a'+i)), p))
			}
			if got := specmod.RootfsPropagation(tt.current, ms); got != tt.want {
				t.Errorf("RootfsPropagation(%q, %v) = %q, want %q", tt.current, tt.mounts, got, tt.want)
			}
		})
	}
}

func destinations(ms []oci.Mount) []string {
	var ds []string
	for _, m := range ms {
		ds = append(ds, m.Destination)
	}
	return ds
}

func TestApply(t *testing.T) {
	tests := []struct {
		name      string
		spec      oci.Spec
		mounts    []specmod.Mount
		wantDst   []string // destinations in order after Apply
		wantLinux *oci.Linux
	}{
		{
			name:    "no edits leave the spec alone, unsorted",
			spec:    oci.Spec{Mounts: []oci.Mount{{Destination: "/a/b"}, {Destination: "/a"}}},
			wantDst: []string{"/a/b", "/a"},
		},
		{
			name:    "private mounts are appended and leave linux nil",
			spec:    oci.Spec{Mounts: []oci.Mount{{Destination: "/proc"}, {Destination: "/dev"}}},
			mounts:  []specmod.Mount{mnt("/srv/a", "/a", specmod.Private), mnt("/srv/b", "/b", specmod.Private)},
			wantDst: []string{"/proc", "/dev", "/a", "/b"},
		},
		{
			name: "mounts sorted by destination depth, stably",
			spec: oci.Spec{Mounts: []oci.Mount{{Destination: "/a/b/c"}, {Destination: "/x"}, {Destination: "/dev/shm"}, {Destination: "/dev"}}},
			mounts: []specmod.Mount{
				mnt("/srv/ab", "/a/b", specmod.Private),
				mnt("/srv/a", "/a", specmod.Private),
				mnt("/srv/y", "/y", specmod.Private),
			},
			wantDst: []string{"/x", "/dev", "/a", "/y", "/dev/shm", "/a/b", "/a/b/c"},
		},
		{
			name:      "slave mount raises missing linux to rslave",
			spec:      oci.Spec{},
			mounts:    []specmod.Mount{mnt("/srv/a", "/a", specmod.Slave)},
			wantDst:   []string{"/a"},
			wantLinux: &oci.Linux{RootfsPropagation: "rslave"},
		},
		{
			name:      "shared mount raises rslave to rshared and keeps other linux fields",
			spec:      oci.Spec{Linux: &oci.Linux{RootfsPropagation: "rslave", MountLabel: "label"}},
			mounts:    []specmod.Mount{mnt("/srv/a", "/a", specmod.Shared)},
			wantDst:   []string{"/a"},
			wantLinux: &oci.Linux{RootfsPropagation: "rshared", MountLabel: "label"},
		},
		{
			name:      "slave mount never lowers rshared",
			spec:      oci.Spec{Linux: &oci.Linux{RootfsPropagation: "rshared"}},
			mounts:    []specmod.Mount{mnt("/srv/a", "/a", specmod.Slave), mnt("/srv/b", "/b", specmod.Private)},
			wantDst:   []string{"/a", "/b"},
			wantLinux: &oci.Linux{RootfsPropagation: "rshared"},
		},
		{
			name:      "private mount keeps rprivate",
			spec:      oci.Spec{Linux: &oci.Linux{RootfsPropagation: "rprivate"}},
			mounts:    []specmod.Mount{mnt("/srv/a", "/a", specmod.Private)},
			wantDst:   []string{"/a"},
			wantLinux: &oci.Linux{RootfsPropagation: "rprivate"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			if err := (specmod.Edits{Mounts: tt.mounts}).Apply(&spec); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if got := destinations(spec.Mounts); !reflect.DeepEqual(got, tt.wantDst) {
				t.Errorf("mount destinations after Apply\ngot:  %q\nwant: %q", got, tt.wantDst)
			}
			for _, m := range tt.mounts {
				found := false
				for _, got := range spec.Mounts {
					if got.Destination == m.Destination {
						found = true
						if want := m.OCI(); !reflect.DeepEqual(got, want) {
							t.Errorf("mount at %s\ngot:  %+v\nwant: %+v", m.Destination, got, want)
						}
					}
				}
				if !found {
					t.Errorf("mount %s is missing from the spec", m)
				}
			}
			if !reflect.DeepEqual(spec.Linux, tt.wantLinux) {
				t.Errorf("linux after Apply\ngot:  %+v\nwant: %+v", spec.Linux, tt.wantLinux)
			}
		})
	}
}

// TestApplySortIsStable uses enough mounts that an unstable sort would show: mounts of one
// depth must keep the order the runtime and the edits gave them.
func TestApplySortIsStable(t *testing.T) {
	var spec oci.Spec
	var e specmod.Edits
	var want1, want2, want3 []string
	for i := range 40 {
		d1 := fmt.Sprintf("/d%02d", i)
		d2 := fmt.Sprintf("/p%02d/c", i)
		d3 := fmt.Sprintf("/q%02d/c/g", i)
		if i%2 == 0 {
			spec.Mounts = append(spec.Mounts, oci.Mount{Destination: d3}, oci.Mount{Destination: d2}, oci.Mount{Destination: d1})
		} else {
			e.Mounts = append(e.Mounts, mnt("/srv"+d3, d3, specmod.Private), mnt("/srv"+d1, d1, specmod.Private), mnt("/srv"+d2, d2, specmod.Private))
		}
		want1, want2, want3 = append(want1, d1), append(want2, d2), append(want3, d3)
	}
	// Existing mounts come first in each depth, then the edits, each in their own order.
	evenOdd := func(ds []string) []string {
		var out []string
		for i := 0; i < len(ds); i += 2 {
			out = append(out, ds[i])
		}
		for i := 1; i < len(ds); i += 2 {
			out = append(out, ds[i])
		}
		return out
	}
	want := append(append(evenOdd(want1), evenOdd(want2)...), evenOdd(want3)...)
	if err := e.Apply(&spec); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if got := destinations(spec.Mounts); !reflect.DeepEqual(got, want) {
		t.Errorf("mount order after Apply\ngot:  %q\nwant: %q", got, want)
	}
}

func TestApplyRefusesExistingDestination(t *testing.T) {
	spec := oci.Spec{
		Mounts: []oci.Mount{{Destination: "/b/c", Source: "/x"}, {Destination: "/data", Source: "/pod/volume"}},
		Linux:  &oci.Linux{RootfsPropagation: "rprivate"},
	}
	before := oci.Spec{Mounts: append([]oci.Mount(nil), spec.Mounts...), Linux: &oci.Linux{RootfsPropagation: "rprivate"}}
	e := specmod.Edits{Mounts: []specmod.Mount{mnt("/srv/a", "/a", specmod.Shared), mnt("/srv/data", "/data", specmod.Slave)}}
	err := e.Apply(&spec)
	if err == nil {
		t.Fatalf("Apply replaced the container's mount at /data: mounts now %+v", spec.Mounts)
	}
	if want := "mount /srv/data -> /data (rslave): the spec already has a mount at /data"; err.Error() != want {
		t.Errorf("Apply error\ngot:  %s\nwant: %s", err, want)
	}
	var me *specmod.MountError
	if !errors.As(err, &me) || me.Mount.Destination != "/data" {
		t.Errorf("Apply error %q is not a *specmod.MountError for /data", err)
	}
	if !reflect.DeepEqual(spec, before) {
		t.Errorf("a refused Apply changed the spec\ngot:  %+v\nwant: %+v", spec, before)
	}
}
