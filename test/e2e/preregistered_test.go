//go:build e2e

package e2e

import (
	"testing"
)

// TestPreRegisteredPlugin installs mountkeeper the way a node does without a DaemonSet: the
// binary in the runtime's NRI plugin directory as 10-mountkeeper (containerd's plugin_path,
// CRI-O's nri_plugin_dir), its config in the plugin config directory (plugin_config_path,
// nri_plugin_config_dir) as 10-mountkeeper.conf. The runtime starts it with no flags and only
// the NRI environment; the plugin takes the config the runtime passes. After a runtime
// restart the runtime starts it again and it serves the next container.
func TestPreRegisteredPlugin(t *testing.T) { forEachRuntime(t, testPreRegisteredPlugin) }
