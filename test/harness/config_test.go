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

// TestCRIOConfigAccepted checks that crio parses the rendered CRI-O config (`crio config`
// prints the effective one) and that none of CRI-O's state, sockets or plugin directories
// falls back to a host default.
func TestCRIOConfigAccepted(t *testing.T) {
	bin := filepath.Join(Options{}.binDir(), crioBin)
	testenv.Require(t, bin)
	l := layout{dir: t.TempDir()}
	c := &CRIO{instance{opts: Options{BinDir: filepath.Dir(bin), Handlers: []string{"mk-test"}, NRI: true,
		NRIRequestTimeout: 5 * time.Second}, layout: l}}
	if err := c.writeConfig("/wrapper/runc"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", c.config(), "--config-dir", c.configDir(), "config")
	cmd.Env = c.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("crio config: %v\n%s", err, out)
	}
	dump := string(out)
	for _, want := range []string{
		`listen = "` + c.socket() + `"`,
		`cgroup_manager = "cgroupfs"`,
		`conmon_cgroup = "pod"`,
		`[crio.runtime.runtimes.mk-test]`,
		`runtime_path = "/wrapper/runc"`,
		`enable_nri = true`,
		`nri_listen = "` + l.nriSocket() + `"`,
		`nri_plugin_request_timeout = "5s"`,
		`pause_image = "` + PauseImage + `"`,
		`hooks_dir = [`,
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("crio config lacks %q", want)
		}
	}
	for _, host := range []string{`"/var/lib/containers`, `"/run/containers`, `"/var/run/crio`, `"/var/lib/crio`,
		`"/var/log/crio`, `"/etc/cni`, `"/opt/cni`, `"/usr/share/containers/oci/hooks.d`, `"/var/run/nri`,
		`"/opt/nri`, `"/etc/nri`, `"/etc/cdi`, `"/var/run/cdi`} {
		if strings.Contains(dump, host) {
			t.Errorf("crio config still names host path %s...", host)
		}
	}
	if t.Failed() {
		t.Log(dump)
	}
}
