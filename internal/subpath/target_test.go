package subpath

import "testing"

func TestParseTarget(t *testing.T) {
	const root = "/var/lib/kubelet"
	tests := []struct {
		name   string
		root   string
		source string
		want   Target
		ok     bool
	}{
		{name: "valid", root: root, source: root + "/pods/uid-1/volume-subpaths/cfg/app/0", ok: true,
			want: Target{Path: root + "/pods/uid-1/volume-subpaths/cfg/app/0", PodUID: "uid-1", Volume: "cfg", Container: "app", Index: 0}},
		{name: "valid, two-digit index", root: root, source: root + "/pods/u/volume-subpaths/v/c/12", ok: true,
			want: Target{Path: root + "/pods/u/volume-subpaths/v/c/12", PodUID: "u", Volume: "v", Container: "c", Index: 12}},
		{name: "root given with a trailing slash", root: root + "/", source: root + "/pods/u/volume-subpaths/v/c/1", ok: true,
			want: Target{Path: root + "/pods/u/volume-subpaths/v/c/1", PodUID: "u", Volume: "v", Container: "c", Index: 1}},
		{name: "kubelet root is /", root: "/", source: "/pods/u/volume-subpaths/v/c/1", ok: true,
			want: Target{Path: "/pods/u/volume-subpaths/v/c/1", PodUID: "u", Volume: "v", Container: "c", Index: 1}},
		{name: "names with dots are names", root: root, source: root + "/pods/u/volume-subpaths/...v/c.d/3", ok: true,
			want: Target{Path: root + "/pods/u/volume-subpaths/...v/c.d/3", PodUID: "u", Volume: "...v", Container: "c.d", Index: 3}},
		{name: "wrong root", root: "/data/kubelet", source: root + "/pods/u/volume-subpaths/v/c/0"},
		{name: "root is a prefix of another dir", root: root, source: root + "2/pods/u/volume-subpaths/v/c/0"},
		{name: "relative root", root: "var/lib/kubelet", source: "var/lib/kubelet/pods/u/volume-subpaths/v/c/0"},
		{name: "too short", root: root, source: root + "/pods/u/volume-subpaths/v/c"},
		{name: "too long", root: root, source: root + "/pods/u/volume-subpaths/v/c/0/x"},
		{name: "not volume-subpaths", root: root, source: root + "/pods/u/volumes/v/c/0"},
		{name: "a volume, not a subPath", root: root, source: root + "/pods/u/volumes/kubernetes.io~configmap/cfg"},
		{name: "dot-dot escaping", root: root, source: root + "/pods/u/volume-subpaths/v/../../../../etc/x"},
		{name: "dot-dot as a component", root: root, source: root + "/pods/u/volume-subpaths/../c/0"},
		{name: "dot component", root: root, source: root + "/pods/u/volume-subpaths/./c/0/1"},
		{name: "double slash", root: root, source: root + "/pods/u/volume-subpaths//v/c/0"},
		{name: "trailing slash", root: root, source: root + "/pods/u/volume-subpaths/v/c/0/"},
		{name: "relative source", root: root, source: "pods/u/volume-subpaths/v/c/0"},
		{name: "index not a number", root: root, source: root + "/pods/u/volume-subpaths/v/c/x"},
		{name: "negative index", root: root, source: root + "/pods/u/volume-subpaths/v/c/-1"},
		{name: "index with leading zero", root: root, source: root + "/pods/u/volume-subpaths/v/c/01"},
		{name: "index with plus sign", root: root, source: root + "/pods/u/volume-subpaths/v/c/+1"},
		{name: "empty", root: root, source: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseTarget(tt.root, tt.source)
			if ok != tt.ok || got != tt.want {
				t.Errorf("ParseTarget(%q, %q) = %+v, %v; want %+v, %v", tt.root, tt.source, got, ok, tt.want, tt.ok)
			}
		})
	}
}
