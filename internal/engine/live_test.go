package engine

import (
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
)

func TestMarkLive(t *testing.T) {
	const a, b = "/k/pods/u/volume-subpaths/cfg/app/0", "/k/pods/u/volume-subpaths/cfg/app/1"
	mounts := []oci.Mount{
		{Source: a, Destination: "/etc/app.conf", Options: []string{"rbind", "rprivate"}},
		{Source: b, Destination: "/etc/shared", Options: []string{"rbind", "rshared"}},
	}
	optIn := map[string]string{configs.LiveSubPathsAnnotation: "true"}
	for _, tc := range []struct {
		name        string
		updates     string
		annotations map[string]string
		userns      bool
		live        []bool
		note        string
	}{
		{name: "kubelet", updates: configs.SubPathUpdatesKubelet, annotations: optIn, live: []bool{false, false}},
		{name: "live", updates: configs.SubPathUpdatesLive, live: []bool{true, false}, note: "Bidirectional"},
		{name: "podOptIn without the annotation", updates: configs.SubPathUpdatesPodOptIn, live: []bool{false, false}},
		{name: "podOptIn opted in", updates: configs.SubPathUpdatesPodOptIn, annotations: optIn, live: []bool{true, false}, note: "Bidirectional"},
		{name: "podOptIn, other value", updates: configs.SubPathUpdatesPodOptIn, annotations: map[string]string{configs.LiveSubPathsAnnotation: "yes"}, live: []bool{false, false}, note: `"yes" is not "true"`},
		{name: "podOptIn, True", updates: configs.SubPathUpdatesPodOptIn, annotations: map[string]string{configs.LiveSubPathsAnnotation: "True"}, live: []bool{false, false}, note: `"True" is not "true"`},
		{name: "live, user namespace", updates: configs.SubPathUpdatesLive, userns: true, live: []bool{true, false}, note: "Bidirectional"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			copies := []copies.Copy{{Target: subpath.Target{Path: a, Volume: "cfg"}}, {Target: subpath.Target{Path: b, Volume: "cfg"}}}
			notes := markLive(configs.RuntimeClass{SubPathUpdates: tc.updates}, tc.annotations, tc.userns, copies, mounts)
			for i, c := range copies {
				if c.Live != tc.live[i] || c.Idmap != (tc.live[i] && tc.userns) {
					t.Errorf("copy %d live = %v, idmap %v; want live %v, idmapped with a user namespace", i, c.Live, c.Idmap, tc.live[i])
				}
			}
			if got := strings.Join(notes, "\n"); (tc.note == "") != (got == "") || !strings.Contains(got, tc.note) {
				t.Errorf("notes %q, want one with %q", got, tc.note)
			}
		})
	}
}
