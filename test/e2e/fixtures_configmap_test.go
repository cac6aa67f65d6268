//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mountkeeper/mountkeeper/nri"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

// configMapPlugin is the plugin as an operator runs it on a fleet: its config a file in a
// ConfigMap-style directory, which update rewrites the way kubelet does (a new ..<timestamp>
// dir and a ..data swap), and --listen on a unix socket, which status reads.
type configMapPlugin struct {
	*harness.Plugin
	t    *testing.T
	n    *node
	dir  string // the ConfigMap volume
	sock string // --listen
}

// startConfigMapPlugin starts the node's plugin on config, as configMapPlugin says; it is
// stopped when the test ends.
func startConfigMapPlugin(t *testing.T, n *node, config string) *configMapPlugin {
	t.Helper()
	p := &configMapPlugin{t: t, n: n, dir: filepath.Join(n.dir, "configmap"), sock: filepath.Join(n.dir, "ops.sock")}
	p.update(config)
	var err error
	p.Plugin, err = harness.StartPlugin(n.ctx, harness.PluginOptions{Binary: n.bin, Config: filepath.Join(p.dir, "config.yaml"),
		Socket: n.rt.NRISocket(), Log: testWriter{t, "mountkeeper"}, Args: []string{"--listen", "unix:" + p.sock}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// update writes content as the new config, the way kubelet updates a ConfigMap volume.
func (p *configMapPlugin) update(content string) {
	p.t.Helper()
	old, err := harness.WriteAtomic(p.dir, map[string]string{"config.yaml": content})
	if err != nil {
		p.t.Fatal(err)
	}
	if old != "" {
		os.RemoveAll(old)
	}
}

// status is what `mountkeeper status --output json` says of the plugin.
func (p *configMapPlugin) status() nri.Status {
	p.t.Helper()
	out, err := exec.Command(p.n.bin, "status", "--address", "unix:"+p.sock, "--output", "json").Output()
	if err != nil {
		p.t.Fatalf("mountkeeper status: %v", err)
	}
	var st nri.Status
	if err := json.Unmarshal(out, &st); err != nil {
		p.t.Fatalf("status --output json: %v: %s", err, out)
	}
	return st
}
