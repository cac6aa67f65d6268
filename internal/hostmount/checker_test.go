package hostmount_test

import (
	"errors"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/hostmount"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// fakeInspector answers from tables. It fails the test when asked for the mount point of a
// path it has none for: the Checker must only look up the mount points of propagating mounts.
type fakeInspector struct {
	t        *testing.T
	exists   map[string]bool                 // path -> exists; absent: does not exist
	statErr  map[string]error                // path -> Stat error other than not-exist
	mps      map[string]hostmount.MountPoint // path -> mount point holding it
	mpsErr   error                           // MountPoints fails with this
	mpsCalls [][]string
}

func (f *fakeInspector) Stat(path string) (fs.FileInfo, error) {
	if err, ok := f.statErr[path]; ok {
		return nil, err
	}
	if !f.exists[path] {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
	}
	return nil, nil
}

func (f *fakeInspector) MountPoints(paths []string) ([]hostmount.MountPoint, error) {
	f.mpsCalls = append(f.mpsCalls, slices.Clone(paths))
	if f.mpsErr != nil {
		return nil, f.mpsErr
	}
	out := make([]hostmount.MountPoint, len(paths))
	for i, p := range paths {
		mp, ok := f.mps[p]
		if !ok {
			f.t.Errorf("MountPoints asked about %s, which needs no mount point lookup (or the test lacks one)", p)
			return nil, errors.New("fake: unexpected MountPoints path " + p)
		}
		out[i] = mp
	}
	return out, nil
}

func TestCheckSources(t *testing.T) {
	private := hostmount.MountPoint{ID: 21, Path: "/srv"}
	slave := hostmount.MountPoint{ID: 22, Path: "/mnt/slave", Slave: true}
	shared := hostmount.MountPoint{ID: 23, Path: "/run/shared", Shared: true}
	sharedSlave := hostmount.MountPoint{ID: 24, Path: "/var/lib/both", Shared: true, Slave: true}

	m := func(src string, p specmod.Propagation) specmod.Mount {
		return specmod.Mount{Source: src, Destination: "/c" + src, Propagation: p}
	}
	tests := []struct {
		name      string
		mounts    []specmod.Mount
		exists    []string
		statErr   map[string]error
		mps       map[string]hostmount.MountPoint
		mpsErr    error
		want      []string   // substrings of the error, each; nil: no error
		wantCalls [][]string // MountPoints calls
	}{
		{
			name: "no mounts",
		},
		{
			name:   "missing source",
			mounts: []specmod.Mount{m("/srv/missing", specmod.Private)},
			want: []string{
				"mount /srv/missing -> /c/srv/missing (rprivate): source /srv/missing does not exist on the host: create it, or correct source in the runtime class",
			},
		},
		{
			name:    "source that cannot be stat'ed",
			mounts:  []specmod.Mount{m("/nfs/dead", specmod.Private)},
			statErr: map[string]error{"/nfs/dead": errors.New("stat /nfs/dead: no answer within 1s")},
			want:    []string{"source /nfs/dead cannot be checked: stat /nfs/dead: no answer within 1s"},
		},
		{
			name:   "rprivate needs no mount point lookup",
			mounts: []specmod.Mount{m("/srv/a", specmod.Private), m("/srv/b", specmod.Private)},
			exists: []string{"/srv/a", "/srv/b"},
		},
		{
			name:      "rslave from a private mount point",
			mounts:    []specmod.Mount{m("/srv/a", specmod.Slave)},
			exists:    []string{"/srv/a"},
			mps:       map[string]hostmount.MountPoint{"/srv/a": private},
			wantCalls: [][]string{{"/srv/a"}},
			want: []string{
				`mount /srv/a -> /c/srv/a (rslave): host mount point /srv holding the source is private, but rslave (HostToContainer) needs it shared or slave: run "mount --make-rshared /srv" on the host (or make it rslave)`,
			},
		},
		{
			name:      "rslave from a slave mount point",
			mounts:    []specmod.Mount{m("/mnt/slave/a", specmod.Slave)},
			exists:    []string{"/mnt/slave/a"},
			mps:       map[string]hostmount.MountPoint{"/mnt/slave/a": slave},
			wantCalls: [][]string{{"/mnt/slave/a"}},
		},
		{
			name:      "rslave from a shared mount point",
			mounts:    []specmod.Mount{m("/run/shared/a", specmod.Slave)},
			exists:    []string{"/run/shared/a"},
			mps:       map[string]hostmount.MountPoint{"/run/shared/a": shared},
			wantCalls: [][]string{{"/run/shared/a"}},
		},
		{
			name:      "rshared from a slave-only mount point",
			mounts:    []specmod.Mount{m("/mnt/slave/a", specmod.Shared)},
			exists:    []string{"/mnt/slave/a"},
			mps:       map[string]hostmount.MountPoint{"/mnt/slave/a": slave},
			wantCalls: [][]string{{"/mnt/slave/a"}},
			want: []string{
				`mount /mnt/slave/a -> /c/mnt/slave/a (rshared): host mount point /mnt/slave holding the source is slave, but rshared (Bidirectional) needs it shared: run "mount --make-rshared /mnt/slave" on the host`,
			},
		},
		{
			name:      "rshared from a private mount point",
			mounts:    []specmod.Mount{m("/srv/a", specmod.Shared)},
			exists:    []string{"/srv/a"},
			mps:       map[string]hostmount.MountPoint{"/srv/a": private},
			wantCalls: [][]string{{"/srv/a"}},
			want:      []string{`host mount point /srv holding the source is private, but rshared (Bidirectional) needs it shared: run "mount --make-rshared /srv"`},
		},
		{
			name:      "rshared from a shared mount point",
			mounts:    []specmod.Mount{m("/run/shared/a", specmod.Shared)},
			exists:    []string{"/run/shared/a"},
			mps:       map[string]hostmount.MountPoint{"/run/shared/a": shared},
			wantCalls: [][]string{{"/run/shared/a"}},
		},
		{
			name:      "rshared from a shared and slave mount point",
			mounts:    []specmod.Mount{m("/var/lib/both/a", specmod.Shared)},
			exists:    []string{"/var/lib/both/a"},
			mps:       map[string]hostmount.MountPoint{"/var/lib/both/a": sharedSlave},
			wantCalls: [][]string{{"/var/lib/both/a"}},
		},
		{
			name: "one lookup for all propagating mounts, missing ones left out",
			mounts: []specmod.Mount{
				m("/srv/p", specmod.Private),
				m("/run/shared/x", specmod.Shared),
				m("/srv/gone", specmod.Slave),
				m("/mnt/slave/y", specmod.Slave),
				m("/srv/z", specmod.Slave),
			},
			exists: []string{"/srv/p", "/run/shared/x", "/mnt/slave/y", "/srv/z"},
			mps: map[string]hostmount.MountPoint{
				"/run/shared/x": shared, "/mnt/slave/y": slave, "/srv/z": private,
			},
			wantCalls: [][]string{{"/run/shared/x", "/mnt/slave/y", "/srv/z"}},
			want: []string{
				"mount /srv/gone -> /c/srv/gone (rslave): source /srv/gone does not exist on the host",
				`mount /srv/z -> /c/srv/z (rslave): host mount point /srv holding the source is private`,
			},
		},
		{
			name:      "mount point lookup fails",
			mounts:    []specmod.Mount{m("/srv/gone", specmod.Private), m("/srv/a", specmod.Slave), m("/srv/b", specmod.Shared)},
			exists:    []string{"/srv/a", "/srv/b"},
			mpsErr:    errors.New("read mountinfo: boom"),
			wantCalls: [][]string{{"/srv/a", "/srv/b"}},
			want: []string{
				"source /srv/gone does not exist on the host",
				"find the host mount points of [/srv/a /srv/b]: read mountinfo: boom",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &fakeInspector{t: t, exists: map[string]bool{}, statErr: tt.statErr, mps: tt.mps, mpsErr: tt.mpsErr}
			for _, p := range tt.exists {
				in.exists[p] = true
			}
			// The timeout only guards against a hung check; the fake answers at once.
			err := hostmount.NewChecker(in).WithTimeout(time.Hour).CheckSources(tt.mounts)
			if !reflect.DeepEqual(in.mpsCalls, tt.wantCalls) {
				t.Errorf("MountPoints calls\ngot:  %q\nwant: %q", in.mpsCalls, tt.wantCalls)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatalf("CheckSources: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckSources accepted the mounts, want an error containing %q", tt.want)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("CheckSources error\ngot:  %s\nwant it to contain: %s", err, want)
				}
			}
		})
	}
}

// TestCheckSourcesMountErrors checks that each per-mount problem is a *specmod.MountError for
// its own mount, so that callers can tell which mount failed.
func TestCheckSourcesMountErrors(t *testing.T) {
	in := &fakeInspector{
		t:      t,
		exists: map[string]bool{"/srv/a": true},
		mps:    map[string]hostmount.MountPoint{"/srv/a": {ID: 1, Path: "/srv"}},
	}
	mounts := []specmod.Mount{
		{Source: "/srv/missing", Destination: "/m", Propagation: specmod.Private},
		{Source: "/srv/a", Destination: "/a", Propagation: specmod.Slave},
	}
	err := hostmount.NewChecker(in).WithTimeout(time.Hour).CheckSources(mounts)
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("CheckSources = %v, want two joined errors", err)
	}
	errs := joined.Unwrap()
	if len(errs) != len(mounts) {
		t.Fatalf("CheckSources returned %d errors, want %d: %v", len(errs), len(mounts), err)
	}
	for i, e := range errs {
		var me *specmod.MountError
		if !errors.As(e, &me) {
			t.Errorf("error %d (%q) is not a *specmod.MountError", i, e)
			continue
		}
		if !reflect.DeepEqual(me.Mount, mounts[i]) {
			t.Errorf("error %d is about mount %s, want %s", i, me.Mount, mounts[i])
		}
	}
}

func TestCheckerIsASpecmodHost(t *testing.T) {
	in := &fakeInspector{t: t, exists: map[string]bool{}}
	e := specmod.Edits{Mounts: []specmod.Mount{{Source: "/srv/missing", Destination: "/m", Propagation: specmod.Slave}}}
	err := e.Verify(nil, hostmount.NewChecker(in))
	if err == nil || !strings.Contains(err.Error(), "source /srv/missing does not exist on the host") {
		t.Errorf("Verify through a Checker = %v, want the missing source reported", err)
	}
	if len(in.mpsCalls) != 0 {
		t.Errorf("MountPoints called %q for a missing source", in.mpsCalls)
	}
}
