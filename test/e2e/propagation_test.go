//go:build e2e

package e2e

import (
	"testing"
)

// TestPropagation proves the three propagations on a real container, under containerd and
// CRI-O: a mount made on the host after the container started shows through rslave and
// rshared only; a mount made in the container shows on the host through rshared only; an
// rshared mount from a private source fails creation with mountkeeper's own error, which
// names the container even for a CRI client that sets none of kubelet's labels; after a
// runtime restart the plugin reconnects and serves the next container.
func TestPropagation(t *testing.T) {
	forEachRuntime(t, testPropagation)
}
