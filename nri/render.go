package nri

import (
	"encoding/json"
	"fmt"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/netmount"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// RenderOptions say what a render does beyond deciding and checking.
type RenderOptions struct {
	// Network mounts a network filesystem and returns its host path (the precreate hook).
	// Nil is a dry run (`mountkeeper render`): the source is where it would be mounted, and
	// the host check says whether it is mounted there now.
	Network func(netmount.Spec) (string, error)
	// RepairSubPaths repairs stale kubelet subPath binds among the spec's mounts, as the plugin
	// does (the precreate hook); a dry run leaves them alone.
	RepairSubPaths bool
	Log            *logrus.Logger
}

// RenderSpec adds the class mounts of a runtime handler to a config.json document, deciding and
// checking exactly as CreateContainer does. Unlike the plugin, which leaves pods of unknown
// handlers alone, it fails for a handler with no class: whoever asks for a render of a class
// expects that class to exist.
func RenderSpec(cfg *configs.Config, host specmod.Host, handler, container string, doc []byte, o RenderOptions) ([]byte, error) {
	var spec oci.Spec
	if err := json.Unmarshal(doc, &spec); err != nil {
		return nil, fmt.Errorf("parse OCI spec: %w", err)
	}
	if o.RepairSubPaths {
		log := o.Log
		if log == nil {
			log = logrus.StandardLogger()
		}
		if err := repairSubPaths(cfg, log.WithField("container", container), container, spec.Mounts); err != nil {
			return nil, err
		}
	}
	network := o.Network
	if network == nil {
		network = func(s netmount.Spec) (string, error) { return netmount.HostPath(cfg.StateDirPath(), s), nil }
	}
	class, edits, ok, err := editsFor(cfg, host, network, handler, spec.Mounts)
	switch {
	case !ok:
		return nil, fmt.Errorf("no runtime class %q in the config (it has: %v)", class, cfg.ClassNames())
	case err != nil:
		return nil, fmt.Errorf("runtime class %q, container %q: %w", class, container, err)
	}
	return specmod.ApplyJSON(doc, edits)
}
