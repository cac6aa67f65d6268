package specmod

import (
	"encoding/json"
	"fmt"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// ApplyJSON applies edits to a config.json document. Only "mounts" and
// "linux.rootfsPropagation" are rewritten; every other field, including ones newer than the
// runtime-spec version compiled in, reaches the output as it came, so a hook in the middle of
// a runtime's pipeline never drops what a later stage needs.
func ApplyJSON(doc []byte, e Edits) ([]byte, error) {
	var spec oci.Spec
	if err := json.Unmarshal(doc, &spec); err != nil {
		return nil, fmt.Errorf("parse OCI spec: %w", err)
	}
	if err := e.Apply(&spec); err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, fmt.Errorf("parse OCI spec: %w", err)
	}
	if top == nil {
		return nil, fmt.Errorf("parse OCI spec: the document is null, not an object")
	}
	if len(spec.Mounts) > 0 {
		if err := setJSON(top, "mounts", spec.Mounts); err != nil {
			return nil, err
		}
	}
	if spec.Linux != nil && spec.Linux.RootfsPropagation != "" {
		linux := map[string]json.RawMessage{}
		if raw, ok := top["linux"]; ok {
			if err := json.Unmarshal(raw, &linux); err != nil {
				return nil, fmt.Errorf("parse OCI spec linux: %w", err)
			}
		}
		if linux == nil { // "linux": null
			linux = map[string]json.RawMessage{}
		}
		if err := setJSON(linux, "rootfsPropagation", spec.Linux.RootfsPropagation); err != nil {
			return nil, err
		}
		if err := setJSON(top, "linux", linux); err != nil {
			return nil, err
		}
	}
	return json.MarshalIndent(top, "", "\t")
}

func setJSON(m map[string]json.RawMessage, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	m[key] = raw
	return nil
}
