package netmount

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// planAdoption: every live mount is kept; which spec it serves comes from its dir (the key) or
// its state, migrated from the version that wrote it.
func TestPlanAdoption(t *testing.T) {
	const mounts = "/s/mounts"
	sshfs := netspec.Spec{Type: "fuse.sshfs", Source: "root@h:/x", Options: []string{"port=22"}}
	// The same config entry under this agent's rules: the FUSE defaults added.
	sshfsNow := netspec.Spec{Type: sshfs.Type, Source: sshfs.Source, Options: netspec.WithFUSEDefaults(sshfs.Type, sshfs.Options)}
	nfs := netspec.Spec{Type: "nfs", Source: "srv:/a"}
	nfsOther := netspec.Spec{Type: "nfs", Source: "srv:/a", Options: []string{"vers=4.1"}}
	cifs := netspec.Spec{Type: "cifs", Source: "//srv/share", Options: []string{"username=u", "password=old"}}
	cifsNewPassword := netspec.Spec{Type: "cifs", Source: "//srv/share", Options: []string{"username=u", "password=new"}}
	v0 := func(s netspec.Spec) state { return state{Type: s.Type, Source: s.Source, Options: s.Options} } // no version: the oldest state files
	v1 := func(s netspec.Spec) state { return newState(s, "") }
	live := func(keys ...string) map[string]bool {
		m := map[string]bool{}
		for _, k := range keys {
			m[filepath.Join(mounts, k)] = true
		}
		return m
	}
	type want struct{ found, remount, forget []string } // found: "dir->spec source+options (serves|retired)"
	show := func(a adoption) want {
		var w want
		for _, f := range a.found {
			role := "retired"
			if f.serves {
				role = "serves " + f.spec.Key()
			}
			w.found = append(w.found, fmt.Sprintf("%s %s", f.dir, role))
		}
		for _, s := range a.remount {
			w.remount = append(w.remount, s.Key())
		}
		w.forget = a.forget
		return w
	}
	tests := []struct {
		name   string
		live   map[string]bool
		states map[string]state
		wanted []netspec.Spec
		want   want
	}{
		{"the previous release's sshfs mount serves the same config entry under its new key",
			live(sshfs.Key()), map[string]state{sshfs.Key(): v0(sshfs)}, []netspec.Spec{sshfsNow},
			want{found: []string{sshfs.Key() + " serves " + sshfsNow.Key()}}},
		{"a version 0 state with fuseDefaultOptions off is the same spec",
			live(sshfs.Key()), map[string]state{sshfs.Key(): v0(sshfs)}, []netspec.Spec{sshfs},
			want{found: []string{sshfs.Key() + " serves " + sshfs.Key()}}},
		{"a version 1 state is not given the FUSE defaults: a spec without them is another mount",
			live(sshfs.Key()), map[string]state{sshfs.Key(): v1(sshfs)}, []netspec.Spec{sshfsNow},
			want{found: []string{sshfs.Key() + " retired"}}},
		{"a password changed in the config (the same redacted spec): the mount made with the old one is retired",
			live(cifs.Key()), map[string]state{cifs.Key(): v1(cifs)}, []netspec.Spec{cifsNewPassword},
			want{found: []string{cifs.Key() + " retired"}}},
		{"a version 0 state of a cifs mount (secrets in clear, as before ee67526) serves its spec",
			live(cifs.Key()), map[string]state{cifs.Key(): v0(cifs)}, []netspec.Spec{cifs},
			want{found: []string{cifs.Key() + " serves " + cifs.Key()}}},
		{"options changed in the config: the live mount is retired, not unmounted",
			live(nfs.Key()), map[string]state{nfs.Key(): v1(nfs)}, []netspec.Spec{nfsOther},
			want{found: []string{nfs.Key() + " retired"}}},
		{"spec removed from the config: retired",
			live(nfs.Key()), map[string]state{nfs.Key(): v1(nfs)}, nil,
			want{found: []string{nfs.Key() + " retired"}}},
		{"no state file at a spec's key: serves it",
			live(nfs.Key()), nil, []netspec.Spec{nfs},
			want{found: []string{nfs.Key() + " serves " + nfs.Key()}}},
		{"no state file at no spec's key: retired",
			live("00000000deadbeef"), nil, []netspec.Spec{nfs},
			want{found: []string{"00000000deadbeef retired"}, remount: nil}},
		{"a mount at the spec's own key wins over a migrated one, which is retired",
			live(sshfs.Key(), sshfsNow.Key()), map[string]state{sshfs.Key(): v0(sshfs), sshfsNow.Key(): v1(sshfsNow)}, []netspec.Spec{sshfsNow},
			want{found: []string{sshfsNow.Key() + " serves " + sshfsNow.Key(), sshfs.Key() + " retired"}}},
		{"a state without its mount: mounted again if in the config, else forgotten",
			live(), map[string]state{nfs.Key(): v1(nfs), sshfs.Key(): v1(sshfs)}, []netspec.Spec{nfs},
			want{remount: []string{nfs.Key()}, forget: []string{sshfs.Key()}}},
		{"a migrated live mount stands for its spec: its spec's own state is not mounted again",
			live(sshfs.Key()), map[string]state{sshfs.Key(): v0(sshfs)}, []netspec.Spec{sshfsNow},
			want{found: []string{sshfs.Key() + " serves " + sshfsNow.Key()}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := show(planAdoption(mounts, tt.live, tt.states, tt.wanted))
			if !slices.Equal(sorted(got.found), sorted(tt.want.found)) || !slices.Equal(got.remount, tt.want.remount) || !slices.Equal(got.forget, tt.want.forget) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// A state file carries the version of its format and the key it was written under.
func TestStateCarriesItsVersion(t *testing.T) {
	dir := t.TempDir()
	s := netspec.Spec{Type: "cifs", Source: "//srv/share", Options: []string{"password=hunter2"}}
	if err := writeState(dir, s.Key(), newState(s, "/x")); err != nil {
		t.Fatal(err)
	}
	states, errs := readStates(dir)
	st := states[s.Key()]
	if len(errs) != 0 || st.Version != stateVersion || st.Key != s.Key() || slices.Contains(st.Options, "password=hunter2") || st.MountedAt.After(time.Now()) {
		t.Errorf("state %+v (errors %v): want version %d, key %s, the password redacted", st, errs, stateVersion, s.Key())
	}
}

func TestLeftBehind(t *testing.T) {
	dir := t.TempDir()
	if LeftBehind(dir) {
		t.Error("an empty state dir has something left behind")
	}
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	os.MkdirAll(filepath.Join(dir, "mounts"), 0o700)
	if LeftBehind(dir) {
		t.Error("empty state/ and mounts/ have something left behind")
	}
	s := netspec.Spec{Type: "nfs", Source: "srv:/a"}
	if err := writeState(filepath.Join(dir, "state"), s.Key(), newState(s, "")); err != nil {
		t.Fatal(err)
	}
	if !LeftBehind(dir) {
		t.Error("a state file is not seen as left behind")
	}
}
