package specmod_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/specmod"
)

func decode(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("output is not a JSON object: %v\n%s", err, doc)
	}
	return v
}

func TestApplyJSON(t *testing.T) {
	slave := specmod.Edits{Mounts: []specmod.Mount{{Source: "/srv/a", Destination: "/a", Propagation: specmod.Slave, ReadOnly: true}}}
	private := specmod.Edits{Mounts: []specmod.Mount{{Source: "/srv/a", Destination: "/a", Propagation: specmod.Private}}}
	slaveMount := map[string]any{"destination": "/a", "type": "bind", "source": "/srv/a", "options": []any{"rbind", "rslave", "ro"}}
	privateMount := map[string]any{"destination": "/a", "type": "bind", "source": "/srv/a", "options": []any{"rbind", "rprivate"}}

	tests := []struct {
		name  string
		doc   string
		edits specmod.Edits
		want  string // the whole expected document, compared as decoded JSON
	}{
		{
			name: "unknown top-level fields survive",
			doc: `{"ociVersion": "1.3.0", "futureTopLevel": {"nested": [1, 2.5, "x", null]}, "annotations": {"a": "b"},
				"mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}]}`,
			edits: slave,
			want: `{"ociVersion": "1.3.0", "futureTopLevel": {"nested": [1, 2.5, "x", null]}, "annotations": {"a": "b"},
				"mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}, ` + mustJSON(t, slaveMount) + `],
				"linux": {"rootfsPropagation": "rslave"}}`,
		},
		{
			name: "unknown fields inside linux survive",
			doc: `{"linux": {"futureLinuxField": {"k": [true]}, "namespaces": [{"type": "mount"}], "rootfsPropagation": "rprivate"},
				"mounts": []}`,
			edits: slave,
			want: `{"linux": {"futureLinuxField": {"k": [true]}, "namespaces": [{"type": "mount"}], "rootfsPropagation": "rslave"},
				"mounts": [` + mustJSON(t, slaveMount) + `]}`,
		},
		{
			name: "unknown fields inside existing mounts survive, in Apply's order",
			doc: `{"mounts": [{"destination": "/a/deep/x", "type": "bind", "source": "/srv/x", "futureMountField": {"uid": 7}},
				{"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid"], "x-vendor": true}]}`,
			edits: private,
			want: `{"mounts": [{"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid"], "x-vendor": true},
				` + mustJSON(t, privateMount) + `,
				{"destination": "/a/deep/x", "type": "bind", "source": "/srv/x", "futureMountField": {"uid": 7}}]}`,
		},
		{
			name:  "private mount leaves linux out",
			doc:   `{"process": {"args": ["sh"]}}`,
			edits: private,
			want:  `{"process": {"args": ["sh"]}, "mounts": [` + mustJSON(t, privateMount) + `]}`,
		},
		{
			name:  "linux null gets a rootfs propagation",
			doc:   `{"linux": null}`,
			edits: slave,
			want:  `{"linux": {"rootfsPropagation": "rslave"}, "mounts": [` + mustJSON(t, slaveMount) + `]}`,
		},
		{
			name:  "no edits and no mounts add no mounts key",
			doc:   `{"ociVersion": "1.3.0", "futureTopLevel": 1}`,
			edits: specmod.Edits{},
			want:  `{"ociVersion": "1.3.0", "futureTopLevel": 1}`,
		},
		{
			name:  "no edits keep an empty mounts list",
			doc:   `{"mounts": []}`,
			edits: specmod.Edits{},
			want:  `{"mounts": []}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := specmod.ApplyJSON([]byte(tt.doc), tt.edits)
			if err != nil {
				t.Fatalf("ApplyJSON: %v", err)
			}
			got, want := decode(t, out), decode(t, []byte(tt.want))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ApplyJSON\ngot:  %s\nwant: %s", mustJSON(t, got), mustJSON(t, want))
			}
		})
	}
}

func TestApplyJSONErrors(t *testing.T) {
	edits := specmod.Edits{Mounts: []specmod.Mount{{Source: "/srv/a", Destination: "/a", Propagation: specmod.Shared}}}
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{name: "not JSON", doc: `{"mounts": [`, want: "parse OCI spec: unexpected end of JSON input"},
		{name: "empty", doc: ``, want: "parse OCI spec: unexpected end of JSON input"},
		{name: "array", doc: `[]`, want: "parse OCI spec: json: cannot unmarshal array"},
		{name: "null", doc: `null`, want: "parse OCI spec: the document is null, not an object"},
		{name: "mounts of the wrong type", doc: `{"mounts": {"destination": "/a"}}`, want: "parse OCI spec: json: cannot unmarshal object"},
		{name: "existing destination", doc: `{"mounts": [{"destination": "/a", "source": "/pod"}]}`,
			want: "mount /srv/a -> /a (rshared): the spec already has a mount at /a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := specmod.ApplyJSON([]byte(tt.doc), edits)
			if err == nil {
				t.Fatalf("ApplyJSON(%q) = %s, want an error containing %q", tt.doc, out, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ApplyJSON(%q) error\ngot:  %s\nwant it to contain: %s", tt.doc, err, tt.want)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
