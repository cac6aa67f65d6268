// Package examples embeds the install examples that mountkeeper itself writes out, so that
// `mountkeeper runtime configure` and the documented files cannot drift apart.
package examples

import _ "embed"

// ContainerdBaseRuntimeSpec is containerd/base-runtime-spec.json: a base spec for a runtime
// handler, derived from `runc spec` as its README says, with mountkeeper's hook-mode hook.
//
//go:embed containerd/base-runtime-spec.json
var ContainerdBaseRuntimeSpec []byte
