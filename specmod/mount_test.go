package specmod_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/specmod"
)

func TestMountOCI(t *testing.T) {
	tests := []struct {
		name string
		m    specmod.Mount
		want []string
	}{
		{
			name: "private",
			m:    specmod.Mount{Source: "/srv/a", Destination: "/a", Propagation: specmod.Private},
			want: []string{"rbind", "rprivate"},
		},
		{
			name: "slave read-only",
			m:    specmod.Mount{Source: "/srv/a", Destination: "/a", Propagation: specmod.Slave, ReadOnly: true},
			want: []string{"rbind", "rslave", "ro"},
		},
		{
			name: "shared with extras",
			m:    specmod.Mount{Source: "/srv/a", Destination: "/a", Propagation: specmod.Shared, Options: []string{"nosuid", "nodev"}},
			want: []string{"rbind", "rshared", "nosuid", "nodev"},
		},
		{
			name: "read-only with extras: rbind, propagation, ro, extras",
			m:    specmod.Mount{Source: "/srv/a", Destination: "/a", Propagation: specmod.Private, ReadOnly: true, Options: []string{"noexec"}},
			want: []string{"rbind", "rprivate", "ro", "noexec"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := oci.Mount{Destination: tt.m.Destination, Type: "bind", Source: tt.m.Source, Options: tt.want}
			got := tt.m.OCI()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("OCI()\ngot:  %+v\nwant: %+v", got, want)
			}
		})
	}
}

func TestMountOCIDoesNotAliasOptions(t *testing.T) {
	extras := make([]string, 1, 8) // spare capacity: an append into it would be visible here
	extras[0] = "nosuid"
	m := specmod.Mount{Source: "/srv/a", Destination: "/a", Propagation: specmod.Private, Options: extras}
	got := m.OCI()
	for i := range got.Options {
		got.Options[i] = "changed"
	}
	if spare := extras[:2]; spare[0] != "nosuid" || spare[1] != "" {
		t.Errorf("OCI() shares its options with the Mount's: the Mount's backing array now holds %q, want [nosuid \"\"]", spare)
	}
}

func TestMountString(t *testing.T) {
	tests := []struct {
		name string
		m    specmod.Mount
		want string
	}{
		{name: "rw", m: specmod.Mount{Source: "/srv/a", Destination: "/a", Propagation: specmod.Slave}, want: "/srv/a -> /a (rslave)"},
		{name: "ro", m: specmod.Mount{Source: "/srv/a", Destination: "/a", Propagation: specmod.Shared, ReadOnly: true}, want: "/srv/a -> /a (rshared, ro)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMountError(t *testing.T) {
	cause := errors.New("boom")
	err := error(&specmod.MountError{Mount: specmod.Mount{Source: "/srv/a", Destination: "/a", Propagation: specmod.Private}, Err: cause})
	if want := "mount /srv/a -> /a (rprivate): boom"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	if !errors.Is(err, cause) {
		t.Errorf("errors.Is(MountError, cause) = false: MountError must unwrap to its cause")
	}
}

func TestMountValidate(t *testing.T) {
	ok := specmod.Mount{Source: "/srv/a", Destination: "/data", Propagation: specmod.Private}
	with := func(f func(*specmod.Mount)) specmod.Mount {
		m := ok
		f(&m)
		return m
	}
	tests := []struct {
		name string
		m    specmod.Mount
		want []string // nil: valid
	}{
		{name: "valid private", m: ok},
		{name: "valid slave read-only with options", m: with(func(m *specmod.Mount) {
			m.Propagation, m.ReadOnly, m.Options = specmod.Slave, true, []string{"nosuid", "nodev", "noexec", "relatime"}
		})},
		{name: "valid nested destination", m: with(func(m *specmod.Mount) { m.Destination = "/var/lib/data" })},
		{name: "valid destination that only starts like /proc", m: with(func(m *specmod.Mount) { m.Destination = "/procfs" })},
		{name: "valid destination that only starts like /sys", m: with(func(m *specmod.Mount) { m.Destination = "/system/x" })},
		{name: "valid source /", m: with(func(m *specmod.Mount) { m.Source = "/" })},
		{name: "valid Kubernetes propagation name", m: with(func(m *specmod.Mount) { m.Propagation = "Bidirectional" })},

		{name: "empty source", m: with(func(m *specmod.Mount) { m.Source = "" }),
			want: []string{"source is empty: name a host path"}},
		{name: "relative source", m: with(func(m *specmod.Mount) { m.Source = "srv/a" }),
			want: []string{`source "srv/a" is not an absolute path`}},
		{name: "source with dot-dot", m: with(func(m *specmod.Mount) { m.Source = "/srv/../etc" }),
			want: []string{`source "/srv/../etc" contains ".."`}},
		{name: "source with trailing slash", m: with(func(m *specmod.Mount) { m.Source = "/srv/a/" }),
			want: []string{`source "/srv/a/" is not clean: write "/srv/a"`}},
		{name: "source with dot", m: with(func(m *specmod.Mount) { m.Source = "/srv/./a" }),
			want: []string{`source "/srv/./a" is not clean: write "/srv/a"`}},
		{name: "empty destination", m: with(func(m *specmod.Mount) { m.Destination = "" }),
			want: []string{"destination is empty: name an absolute path in the container"}},
		{name: "relative destination", m: with(func(m *specmod.Mount) { m.Destination = "./data" }),
			want: []string{`destination "./data" is relative: it must be an absolute path in the container`}},
		{name: "destination with dot-dot", m: with(func(m *specmod.Mount) { m.Destination = "/data/.." }),
			want: []string{`destination "/data/.." contains "..": it could leave the container's root`}},
		{name: "destination with double slash", m: with(func(m *specmod.Mount) { m.Destination = "/data//x" }),
			want: []string{`destination "/data//x" is not clean: write "/data/x"`}},
		{name: "destination root", m: with(func(m *specmod.Mount) { m.Destination = "/" }),
			want: []string{`destination "/" would hide the container's root filesystem`}},
		{name: "destination /proc", m: with(func(m *specmod.Mount) { m.Destination = "/proc" }),
			want: []string{`destination "/proc" is inside /proc or /sys, which the runtime mounts`}},
		{name: "destination below /sys", m: with(func(m *specmod.Mount) { m.Destination = "/sys/fs/cgroup" }),
			want: []string{`destination "/sys/fs/cgroup" is inside /proc or /sys`}},
		{name: "empty propagation", m: with(func(m *specmod.Mount) { m.Propagation = "" }),
			want: []string{`unknown propagation ""`}},
		{name: "non-recursive propagation", m: with(func(m *specmod.Mount) { m.Propagation = "slave" }),
			want: []string{`unknown propagation "slave"`}},
		{name: "propagation options", m: with(func(m *specmod.Mount) { m.Options = []string{"private", "runbindable"} }),
			want: []string{
				`option "private" sets propagation: use the propagation key instead`,
				`option "runbindable" sets propagation`,
			}},
		{name: "ro and rw options", m: with(func(m *specmod.Mount) { m.Options = []string{"ro", "rw"} }),
			want: []string{`option "ro": use readOnly: true or false instead`, `option "rw": use readOnly`}},
		{name: "bind and rbind options", m: with(func(m *specmod.Mount) { m.Options = []string{"bind", "rbind"} }),
			want: []string{`option "bind" is implied: every class mount is a recursive bind`, `option "rbind" is implied`}},
		{name: "non-bind option", m: with(func(m *specmod.Mount) { m.Options = []string{"nosuid", "mode=755"} }),
			want: []string{`option "mode=755" is not a bind mount option (allowed: nosuid, nodev, noexec, noatime, nodiratime, relatime, strictatime and their negations)`}},
		{name: "every problem at once", m: specmod.Mount{Source: "a", Destination: "/sys", Propagation: "shared", Options: []string{"ro", "x"}},
			want: []string{
				`source "a" is not an absolute path`,
				`destination "/sys" is inside /proc or /sys`,
				`unknown propagation "shared"`,
				`option "ro": use readOnly`,
				`option "x" is not a bind mount option`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.Validate()
			if tt.want == nil {
				if err != nil {
					t.Errorf("Validate(%+v): %v", tt.m, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%+v) accepted an invalid mount, want an error containing %q", tt.m, tt.want)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate(%+v) error\ngot:  %s\nwant it to contain: %s", tt.m, err, want)
				}
			}
		})
	}
}
