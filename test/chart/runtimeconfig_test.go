package chart

import (
	"os"
	"path/filepath"
	"testing"
)

// runtimeConfigAnnotation is the DaemonSet pod template's checksum of what runtime configure
// writes, "" when there is none.
func runtimeConfigAnnotation(t *testing.T, rendered string) string {
	t.Helper()
	for _, obj := range objects(t, rendered) {
		meta, _ := obj["metadata"].(map[string]any)
		if obj["kind"] != "DaemonSet" || meta["name"] != release {
			continue
		}
		spec, _ := obj["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		tmeta, _ := tmpl["metadata"].(map[string]any)
		ann, _ := tmeta["annotations"].(map[string]any)
		s, _ := ann["mountkeeper.io/runtime-config"].(string)
		return s
	}
	t.Fatal("no agent DaemonSet rendered")
	return ""
}

// TestRuntimeConfigChecksum: helm upgrade rolls the agent's pods (so that the init container
// configures the runtime again) when a class is added, renamed or removed, or the runtime's
// files change, with the same image; a change that reloads live (a class's mounts, a config
// key) or the pod annotations of the operator leave the checksum as it was.
func TestRuntimeConfigChecksum(t *testing.T) {
	classes := func(t *testing.T, yaml string) string {
		p := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const one = "runtimeClasses:\n  - name: shared-data\n    mounts: [{source: /srv/shared, destination: /shared, readOnly: true}]\n"
	const two = one + "  - name: scratch\n    mounts: [{source: /srv/scratch, destination: /scratch}]\n"
	base := runtimeConfigAnnotation(t, render(t, []string{classes(t, one)}))
	if len(base) != 64 {
		t.Fatalf("checksum %q: want a sha256", base)
	}
	for _, tc := range []struct {
		name    string
		values  string
		set     []string
		changes bool
	}{
		{"a class added", two, nil, true},
		{"a class renamed", "runtimeClasses:\n  - name: shared\n    mounts: [{source: /srv/shared, destination: /shared, readOnly: true}]\n", nil, true},
		{"no class", "runtimeClasses: []\n", nil, true},
		{"another distribution", one, []string{"distribution=k3s"}, true},
		{"another state dir", one, []string{"config.stateDir=/var/lib/mk"}, true},
		{"another mount of the class", "runtimeClasses:\n  - name: shared-data\n    mounts: [{source: /srv/other, destination: /other}]\n", nil, false},
		{"the default class", one + "  - name: default\n    mounts: [{source: /srv/d, destination: /d}]\n", nil, false},
		{"a config key", one, []string{"config.mountTimeout=20s"}, false},
		{"another image tag", one, []string{"image.tag=v9"}, false},
		{"pod annotations", one, []string{"podAnnotations.a=b"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runtimeConfigAnnotation(t, render(t, []string{classes(t, tc.values)}, tc.set...))
			if (got != base) != tc.changes {
				t.Errorf("checksum %s, with one class %s: want changed %v", got, base, tc.changes)
			}
		})
	}
}
