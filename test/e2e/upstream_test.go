//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestUpstreamSubPath runs upstream's subPath tests twice on one real node (containerd with
// NRI, kubelet, kube-apiserver, controller-manager, scheduler, in a network of its own):
// first without mountkeeper, then with the plugin attached (the kube tests' config, subPath
// repair on). Every test that passes without mountkeeper must pass with it; the runs' counts
// and every test that did not pass are logged.
func TestUpstreamSubPath(t *testing.T) {
	testenv.Require(t, "root")
	bin := cmp.Or(os.Getenv("MOUNTKEEPER_BIN"), filepath.Join(cmp.Or(os.Getenv("MOUNTKEEPER_CACHE"), "/var/cache/mountkeeper-test"), "bin"))
	for _, b := range upstreamBinaries {
		testenv.Require(t, filepath.Join(bin, b))
	}
	if why := harness.NodeNetworkMissing(); why != "" {
		testenv.Skip(t, "no node network: %s", why)
	}
	opts := harness.KubeOptions{BinDir: bin, ControlPlane: true}
	if why := harness.KubeMissing(opts); why != "" {
		testenv.Skip(t, "no Kubernetes node: %s", why)
	}
	minSpecs := upstreamMinSpecs
	if os.Getenv(upstreamFocusEnv) != "" {
		minSpecs = 1
	}
	ctx := context.Background()
	setupStart := time.Now()

	network, netDir := startNodeNetwork(t, ctx)
	opts.Network = network
	n := newKubeNodeCtrd(t, ctx, opts, []string{"mk-kube"}, harness.Options{
		BinDir:            bin,
		Network:           network,
		CNIBinDir:         network.CNIBinDir(),
		CNIConfDir:        network.CNIConfDir(),
		RegistryConfigDir: filepath.Join(netDir, "registries"),
	})
	checkUpstreamImages(t, filepath.Join(bin, "e2e.test"))
	if err := n.ctrd.ImportUpstreamImages(ctx, filepath.Join(bin, "agnhost")); err != nil {
		t.Fatal(err)
	}
	if err := waitNodeReady(ctx, n.api, n.kube.NodeName(), 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, tailFile(n.kube.LogPath("kubelet"), 4096))
	}
	t.Logf("node up in %v", time.Since(setupStart).Round(time.Second))

	without := n.runUpstream(bin, "without-mountkeeper")
	// Attached to the same node, as a DaemonSet or systemd would attach it to a running one.
	pluginLog, err := os.Create(filepath.Join(n.dir, "mountkeeper.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer pluginLog.Close()
	n.pluginLog = pluginLog
	n.startPlugin(true)
	with := n.runUpstream(bin, "with-mountkeeper")
	n.plugin.Stop()

	regressions := compareUpstream(without, with)
	t.Logf("upstream subPath tests: %s without mountkeeper; %s with mountkeeper", without.counts(), with.counts())
	t.Logf("not passed without mountkeeper:\n%s", without.notPassed(nil))
	t.Logf("not passed with mountkeeper:\n%s", with.notPassed(without))
	// Without mountkeeper every selected test passes on this node (a test that cannot run here
	// is skipped above, with its reason): one that does not means the node, the images or the
	// selection broke, and the comparison would hide whatever it covers.
	if ran := len(without.specs) - without.count("skipped"); ran < minSpecs {
		t.Errorf("only %d upstream tests ran without mountkeeper, want at least %d: did the suite rename what upstreamFocus selects?", ran, minSpecs)
	}
	for name, s := range without.specs {
		if s.State != "passed" && s.State != "skipped" {
			t.Errorf("%s without mountkeeper (the node is broken for it: see %s): %s\n%s", s.State, without.dir, name, s.failure())
		}
	}
	for _, name := range regressions {
		t.Errorf("passes without mountkeeper, %s with it: %s\n%s", cmp.Or(with.specs[name].State, "did not run"), name, with.specs[name].failure())
	}
	if len(regressions) > 0 {
		t.Logf("mountkeeper's refusals (%s):\n%s", pluginLog.Name(), grepLines(pluginLog.Name(), "level=error", 40))
	}
}
