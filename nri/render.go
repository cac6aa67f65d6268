package nri

import (
	"encoding/json"
	"fmt"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/netmount"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// RenderSpec adds the class mounts of a runtime handler to a config.json document, deciding and
// checking exactly as CreateContainer does. Unlike the plugin, which leaves pods of unknown
// handlers alone, it fails for a handler with no class: whoever asks for a dry run of a class
// expects that class to exist.
func RenderSpec(cfg *configs.Config, host specmod.Host, handler, container string, doc []byte) ([]byte, error) {
	var spec oci.Spec
	if err := json.Unmarshal(doc, &spec); err != nil {
		return nil, fmt.Errorf("parse OCI spec: %w", err)
	}
	// A dry run mounts nothing: a network mount's source is where the plugin mounts it, and
	// the host check says whether it is mounted there now.
	wouldMount := func(s netmount.Spec) (string, error) { return netmount.HostPath(cfg.StateDirPath(), s), nil }
	class, edits, ok, err := editsFor(cfg, host, wouldMount, handler, spec.Mounts)
	switch {
	case !ok:
		return nil, fmt.Errorf("no runtime class %q in the config (it has: %v)", class, cfg.ClassNames())
	case err != nil:
		return nil, fmt.Errorf("runtime class %q, container %q: %w", class, container, err)
	}
	return specmod.ApplyJSON(doc, edits)
}
