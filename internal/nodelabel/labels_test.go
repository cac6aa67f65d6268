package nodelabel

import (
	"reflect"
	"testing"
)

func TestPatch(t *testing.T) {
	for _, tc := range []struct {
		name              string
		current           map[string]string
		classes, handlers []string
		want              map[string]any
	}{
		{"handler not loaded yet: no label", map[string]string{"kubernetes.io/os": "linux"}, []string{"a"}, []string{"runc"}, nil},
		{"handler loaded: label set", nil, []string{"a", "b"}, []string{"runc", "a"}, map[string]any{Key("a"): "true"}},
		{"already labelled: nothing", map[string]string{Key("a"): "true"}, []string{"a"}, []string{"a"}, nil},
		{"handler gone after a restart: label removed", map[string]string{Key("a"): "true"}, []string{"a"}, []string{"runc"}, map[string]any{Key("a"): nil}},
		{"class removed from the config: label removed, others kept",
			map[string]string{Key("a"): "true", Key("old"): "true", "other.io/x": "y"}, []string{"a"}, []string{"a", "old"},
			map[string]any{Key("old"): nil}},
		{"a value someone else set is corrected", map[string]string{Key("a"): "false"}, []string{"a"}, []string{"a"}, map[string]any{Key("a"): "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Patch(tc.current, tc.classes, tc.handlers); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Patch = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRemoveAll(t *testing.T) {
	got := RemoveAll(map[string]string{Key("a"): "true", "kubernetes.io/os": "linux"})
	if want := map[string]any{Key("a"): nil}; !reflect.DeepEqual(got, want) {
		t.Errorf("RemoveAll = %v, want %v", got, want)
	}
	if got := RemoveAll(map[string]string{"kubernetes.io/os": "linux"}); got != nil {
		t.Errorf("RemoveAll without labels = %v, want nil", got)
	}
}
