//go:build e2e

package e2e

import (
	"testing"
)

// TestUninstall: an uninstall leaves the node as it was before the install, and refuses while
// a container still needs what it would remove. On real containerd + runc with sshd over
// loopback: the node is snapshotted, `runtime configure` runs, the runtime restarts and the
// plugin starts; a class pod reads an sshfs class mount and a class pod's container gets a
// private copy of a configMap subPath. While they run, `runtime unconfigure` refuses (the
// runtime could not stop them without the wrapper) and `node cleanup` refuses naming both
// containers. Once the pods are removed and the plugin stopped, `runtime unconfigure` and
// `node cleanup` run: the node is as in the snapshot (uninstallSnapshot). On containerd and on
// CRI-O.
func TestUninstall(t *testing.T) { forEachRuntime(t, uninstall) }
