package netspec

import (
	"slices"
	"strings"
	"testing"
)

func TestWithFUSEDefaults(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		opts []string
		want []string
	}{
		{"fuse.sshfs", nil, []string{"allow_other", "default_permissions"}},
		{"fuse.sshfs", []string{"port=22"}, []string{"port=22", "allow_other", "default_permissions"}},
		{"fuse.sshfs", []string{"allow_root"}, []string{"allow_root", "default_permissions"}},
		{"fuse.sshfs", []string{"default_permissions", "allow_other"}, []string{"default_permissions", "allow_other"}},
		// glusterfs's client sets both itself and its helper refuses them.
		{"glusterfs", nil, nil},
		{"nfs", []string{"vers=4"}, []string{"vers=4"}},
	} {
		if got := WithFUSEDefaults(tc.typ, tc.opts); !slices.Equal(got, tc.want) {
			t.Errorf("%s %q: %q, want %q", tc.typ, tc.opts, got, tc.want)
		}
	}
}

func TestFUSEWarnings(t *testing.T) {
	w := Spec{Type: "fuse.sshfs", Source: "u@h:/d", Options: []string{"allow_other"}}.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "allow_other without default_permissions") {
		t.Errorf("allow_other alone: %q, want the warning", w)
	}
	if w := (Spec{Type: "fuse.sshfs", Source: "u@h:/d", Options: []string{"allow_other", "default_permissions"}}).Warnings(); len(w) != 0 {
		t.Errorf("both: %q, want none", w)
	}
	if w := (Spec{Type: "glusterfs", Source: "h:/v", Options: []string{"allow_other"}}).Warnings(); len(w) != 1 {
		t.Errorf("glusterfs with allow_other: %q, want one", w)
	}
}
