package harness

import (
	"errors"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// TestConfigAccepted checks that containerd parses the rendered config and that no setting
// silently falls back to a host default (a path outside the instance directory).
func TestConfigAccepted(t *testing.T) {
	opts, err := Options{
		Handlers:          []string{"mk-test"},
		BaseRuntimeSpecs:  map[string]string{"mk-test": "/etc/mk-spec.json"},
		NRI:               true,
		NRIRequestTimeout: 5 * time.Second,
	}.withDefaults()
	if errors.Is(err, fs.ErrNotExist) {
		testenv.Skip(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	l := layout{dir: t.TempDir()}
	if err := writeConfig(l, opts); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(opts.BinDir, containerdBin), "--config", l.config(), "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, out)
	}
	dump := string(out)
	for _, want := range []string{
		"restrict_oom_score_adj = true",
		"socket_dir = '" + l.path("s") + "'",
		"[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.mk-test]",
		"base_runtime_spec = '/etc/mk-spec.json'",
		"BinaryName = '" + filepath.Join(opts.BinDir, runcBin) + "'",
		"socket_path = '" + l.nriSocket() + "'",
		"plugin_request_timeout = '5s'",
		"sandbox = '" + PauseImage + "'",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("config dump lacks %q", want)
		}
	}
	for _, host := range []string{"'/var/lib/containerd", "'/run/containerd", "'/opt/containerd'", "'/var/run/nri", "'/etc/cni"} {
		if strings.Contains(dump, host) {
			t.Errorf("config dump still names host path %s...", host)
		}
	}
	if t.Failed() {
		t.Log(dump)
	}
}
