package specmod

import (
	"encoding/json"
	"fmt"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// ApplyJSON applies edits to a config.json document. Only the "mounts" list and
// "linux.rootfsPropagation" change; every other field, including ones newer than the
// runtime-spec version compiled in (inside the existing mounts too), reaches the output as it
// came, so a hook in the middle of a runtime's pipeline never drops what a later stage needs.
// The mounts come out in the order Apply gives them.
func ApplyJSON(doc []byte, e Edits) ([]byte, error) {
	var spec oci.Spec
	if err := json.Unmarshal(doc, &spec); err != nil {
		return nil, fmt.Errorf("parse OCI spec: %w", err)
	}
	existing := spec.Mounts
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
	if len(e.Mounts) > 0 {
		mounts, err := mergeMounts(top["mounts"], existing, e.Mounts)
		if err != nil {
			return nil, err
		}
		top["mounts"] = mounts
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

// mergeMounts adds the edits' mounts to the document's mounts list, keeping each existing
// entry's JSON as it came, and orders them as Apply does.
func mergeMounts(raw json.RawMessage, existing []oci.Mount, added []Mount) (json.RawMessage, error) {
	type entry struct {
		destination string
		raw         json.RawMessage
	}
	var rawExisting []json.RawMessage
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &rawExisting); err != nil {
			return nil, fmt.Errorf("parse OCI spec mounts: %w", err)
		}
	}
	if len(rawExisting) != len(existing) {
		return nil, fmt.Errorf("parse OCI spec mounts: %d entries, %d decoded", len(rawExisting), len(existing))
	}
	entries := make([]entry, 0, len(existing)+len(added))
	for i, m := range existing {
		entries = append(entries, entry{m.Destination, rawExisting[i]})
	}
	for _, m := range added {
		b, err := json.Marshal(m.OCI())
		if err != nil {
			return nil, fmt.Errorf("encode mount %s: %w", m, err)
		}
		entries = append(entries, entry{m.Destination, b})
	}
	sortByDepth(entries, func(e entry) string { return e.destination })
	out := make([]json.RawMessage, len(entries))
	for i, e := range entries {
		out[i] = e.raw
	}
	return json.Marshal(out)
}

func setJSON(m map[string]json.RawMessage, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	m[key] = raw
	return nil
}
