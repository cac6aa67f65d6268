package configs

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/specmod"
)

// chartSchema is the Helm chart's values schema: its config, class and mount definitions are
// this package's types as the chart's values spell them.
const chartSchema = "../deploy/helm/mountkeeper/values.schema.json"

// chartOnlyClassKeys are the class keys the chart reads itself: the class's name (the key of
// runtimeClasses in the config) and the RuntimeClass's scheduling.
var chartOnlyClassKeys = []string{"name", "nodeSelector", "tolerations"}

type schemaProp struct {
	Type    string   `json:"type"`
	Ref     string   `json:"$ref"`
	Enum    []string `json:"enum"`
	Pattern string   `json:"pattern"`
	Items   *struct {
		Ref string `json:"$ref"`
	} `json:"items"`
}

type schemaDef struct {
	AdditionalProperties json.RawMessage       `json:"additionalProperties"`
	Properties           map[string]schemaProp `json:"properties"`
	Pattern              string                `json:"pattern"`
}

// kind is what a schema property holds, in the terms kindOf uses for Go fields.
func (p schemaProp) kind() string {
	switch {
	case p.Ref == "#/definitions/duration":
		return "duration"
	case p.Ref == "#/definitions/size":
		return "size"
	case p.Ref == "#/definitions/subPathCopies":
		return "object #/definitions/subPathCopies"
	case p.Ref == "#/definitions/absPath", len(p.Enum) > 0:
		return "string"
	case p.Type == "array" && p.Items != nil && p.Items.Ref != "":
		return "array of " + p.Items.Ref
	}
	return p.Type
}

// kindOf is the schema kind a field of the config's types must have.
func kindOf(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[Duration]():
		return "duration"
	case t == reflect.TypeFor[Size]():
		return "size"
	case t == reflect.TypeFor[subPathCopiesFile]():
		return "object #/definitions/subPathCopies"
	case t.Kind() == reflect.Int64:
		return "integer"
	case t == reflect.TypeFor[[]Mount]():
		return "array of #/definitions/mount"
	case t.Kind() == reflect.Pointer:
		return kindOf(t.Elem())
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() == reflect.Slice:
		return "array"
	}
	return "unknown Go type " + t.String()
}

// yamlKeys maps each key of a struct as YAML spells it (its yaml tag) to its schema kind.
func yamlKeys(t reflect.Type, skip ...string) map[string]string {
	keys := map[string]string{}
	for f := range t.Fields() {
		name := f.Tag.Get("yaml")
		if name == "" || name == "-" || slices.Contains(skip, name) {
			continue
		}
		keys[name] = kindOf(f.Type)
	}
	return keys
}

func readChartSchema(t *testing.T) map[string]schemaDef {
	t.Helper()
	data, err := os.ReadFile(filepath.FromSlash(chartSchema))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Definitions map[string]schemaDef `json:"definitions"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("%s: %v", chartSchema, err)
	}
	return schema.Definitions
}

// TestChartSchemaMatchesTypes keeps the chart's values.schema.json in step with the config's
// types: every key the config reads is in the schema with the right type, the schema has no
// key the config does not read (the chart's own class keys aside), and its enums are the
// values the config accepts.
func TestChartSchemaMatchesTypes(t *testing.T) {
	defs := readChartSchema(t)
	runtimeClass := yamlKeys(reflect.TypeFor[RuntimeClass]())
	for _, k := range chartOnlyClassKeys {
		if _, clash := runtimeClass[k]; clash {
			t.Fatalf("RuntimeClass has a key %q that the chart reads for itself", k)
		}
	}
	for _, tc := range []struct {
		def  string
		want map[string]string
		own  []string // chart-only keys
	}{
		{"config", yamlKeys(reflect.TypeFor[file](), "runtimeClasses"), nil},
		{"runtimeClass", runtimeClass, chartOnlyClassKeys},
		{"mount", yamlKeys(reflect.TypeFor[Mount]()), nil},
		{"subPathCopies", yamlKeys(reflect.TypeFor[subPathCopiesFile]()), nil},
	} {
		def, ok := defs[tc.def]
		if !ok {
			t.Errorf("%s has no definition %q", chartSchema, tc.def)
			continue
		}
		if string(def.AdditionalProperties) != "false" {
			t.Errorf("definition %q allows unknown keys; the config refuses them: set additionalProperties false", tc.def)
		}
		got := map[string]string{}
		for k, p := range def.Properties {
			if !slices.Contains(tc.own, k) {
				got[k] = p.kind()
			}
		}
		for _, k := range slices.Sorted(maps.Keys(tc.want)) {
			switch g, ok := got[k]; {
			case !ok:
				t.Errorf("definition %q lacks key %q (%s), which the config reads", tc.def, k, tc.want[k])
			case g != tc.want[k]:
				t.Errorf("definition %q: key %q is %s, the config reads %s", tc.def, k, g, tc.want[k])
			}
		}
		for _, k := range slices.Sorted(maps.Keys(got)) {
			if _, ok := tc.want[k]; !ok {
				t.Errorf("definition %q has key %q, which the config does not read", tc.def, k)
			}
		}
	}

	// Enums: exactly the values the config accepts, in their canonical spellings.
	var propagations []string
	for _, p := range []specmod.Propagation{specmod.Private, specmod.Slave, specmod.Shared} {
		propagations = append(propagations, string(p), p.KubernetesName())
	}
	for _, tc := range []struct {
		def, key string
		want     []string
		accepts  func(string) bool
	}{
		{"mount", "propagation", propagations, func(v string) bool { _, err := specmod.ParsePropagation(v); return err == nil }},
		{"runtimeClass", "networkMount", []string{MountOnDemand, MountEager}, func(v string) bool {
			return validateClass("c", RuntimeClass{NetworkMount: v, Mounts: []Mount{{Type: "nfs", Source: "server:/export", Destination: "/d"}}}) == nil
		}},
		{"runtimeClass", "subPathUpdates", []string{SubPathUpdatesKubelet, SubPathUpdatesLive, SubPathUpdatesPodOptIn}, func(v string) bool {
			return validateClass("c", RuntimeClass{SubPathUpdates: v, Mounts: []Mount{{Source: "/srv", Destination: "/d"}}}) == nil
		}},
	} {
		got := defs[tc.def].Properties[tc.key].Enum
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(tc.want))) {
			t.Errorf("definition %q: %s enum %v, want %v", tc.def, tc.key, got, tc.want)
		}
		for _, v := range got {
			if !tc.accepts(v) {
				t.Errorf("definition %q: %s %q is in the schema's enum but the config refuses it", tc.def, tc.key, v)
			}
		}
	}

	// Durations: the schema's pattern takes what the config takes, and refuses bare numbers.
	duration := regexp.MustCompile(defs["duration"].Pattern)
	for _, tc := range []struct {
		v  string
		ok bool
	}{{"30s", true}, {"1500ms", true}, {"1m30s", true}, {"1.5s", true}, {"2h", true}, {"30", false}, {"", false}, {"30 s", false}, {"-1s", false}} {
		_, err := time.ParseDuration(tc.v)
		if got := duration.MatchString(tc.v); got != tc.ok || (tc.ok && err != nil) {
			t.Errorf("duration %q: schema pattern matches %v, want %v (time.ParseDuration: %v)", tc.v, got, tc.ok, err)
		}
	}
}
