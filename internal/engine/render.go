package engine

import (
	"context"
	"encoding/json"
	"fmt"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/specmod"
)

// Render decides for the container a config.json describes and returns the document with the
// class mounts added (specmod.ApplyJSON: fields it does not know survive). A handler with no
// class leaves the document unchanged; the decision says so.
func (e *Engine) Render(ctx context.Context, handler string, c Container, doc []byte) ([]byte, Decision, error) {
	var spec oci.Spec
	if err := json.Unmarshal(doc, &spec); err != nil {
		return nil, Decision{}, fmt.Errorf("parse OCI spec: %w", err)
	}
	d, err := e.Decide(ctx, Request{Handler: handler, Container: c, Mounts: spec.Mounts, Stage: BeforeCreate, Privileged: PrivilegedSpec(&spec), UserNamespace: UserNamespaceSpec(&spec)})
	if err != nil || !d.Configured {
		return doc, d, err
	}
	out, err := specmod.ApplyJSON(doc, d.Edits())
	if err != nil {
		return nil, d, Refuse(handler, c, err)
	}
	return out, d, nil
}
