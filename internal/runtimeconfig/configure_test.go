package runtimeconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/runtimewrap"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// kubeadmConfig is a containerd config as kubeadm-era guides write it: the systemd cgroup
// driver, a runc of its own, a runc root, comments, and keys out of alphabetical order.
const kubeadmConfig = `# containerd config for this node (kept by the platform team)
version = 3

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'

  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2' # the v2 shim
    privileged_without_host_devices = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = true # kubelet runs with cgroupDriver: systemd
      BinaryName = '/usr/local/sbin/runc'
      Root = '/run/containerd/runc-custom'

[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = '/etc/containerd/certs.d'
`

func classConfig(t *testing.T, classes ...string) *configs.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("stateDir: /var/lib/mk\nruntimeClasses:\n  default:\n    mounts: [{source: /srv/d, destination: /d}]\n")
	for _, c := range classes {
		fmt.Fprintf(&b, "  %s:\n    mounts: [{source: /srv/%s, destination: /%s}]\n", c, c, c)
	}
	cfg, err := configs.Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// node is a runtime's config and mountkeeper's install dir below a temp dir.
type node struct {
	root string
	o    Options
}

func newNode(t *testing.T, runtime string) node {
	t.Helper()
	root := t.TempDir()
	wrapper := filepath.Join(root, "build", WrapperName)
	os.MkdirAll(filepath.Dir(wrapper), 0o755)
	if err := os.WriteFile(wrapper, []byte("\x7fELF wrapper"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{Runtime: runtime, InstallDir: filepath.Join(root, "opt/mountkeeper/bin"), Wrapper: wrapper, StateDir: "/var/lib/mk"}
	switch runtime {
	case "containerd":
		o.ConfigFile = filepath.Join(root, "etc/containerd/config.toml")
		o.DropIn = filepath.Join(root, "etc/containerd/conf.d/99-mountkeeper.toml")
	case "crio":
		o.ConfigFile = filepath.Join(root, "etc/crio/crio.conf")
		o.ConfigDir = filepath.Join(root, "etc/crio/crio.conf.d")
	}
	o, err := o.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return node{root: root, o: o}
}

func (n node) write(t *testing.T, path, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// snapshot is every file below the node's etc and opt (testenv.FileTree).
func (n node) snapshot(t *testing.T) map[string]string {
	t.Helper()
	return testenv.FileTree(filepath.Join(n.root, "etc"), filepath.Join(n.root, "opt"))
}

func (n node) configure(t *testing.T, classes ...string) Plan {
	t.Helper()
	names, err := HandlerClasses(classConfig(t, classes...))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Configure(n.o, names, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (n node) unconfigure(t *testing.T) Plan {
	t.Helper()
	p, err := Unconfigure(n.o, nil, "/proc", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// effective is containerd's view: the main file and its imports merged.
func (n node) effective(t *testing.T) map[string]any {
	t.Helper()
	main, _, _ := readFile(n.o.ConfigFile)
	eff, _, _, err := loadContainerd(n.o.ConfigFile, main, "")
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

// TestConfigureContainerdKubeadm: on a kubeadm-style node, a class's handler is the default
// handler (systemd cgroups, its runc, its root) with mountkeeper-runtime as its binary, and the
// operator's file changes by one imports line only: comments, order, mode 0600 and owner
// stay. A second run changes nothing; unconfigure gives the node back byte for byte.
func TestConfigureContainerdKubeadm(t *testing.T) {
	n := newNode(t, "containerd")
	n.write(t, n.o.ConfigFile, kubeadmConfig, 0o600)
	if err := os.Chown(n.o.ConfigFile, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	before := n.snapshot(t)

	p := n.configure(t, "mk-net", "mk-web")
	if !p.RestartNeeded() {
		t.Error("configure changed the config but says no restart is needed")
	}
	main, _ := os.ReadFile(n.o.ConfigFile)
	added := "imports = ['conf.d/99-mountkeeper.toml']" + importComment + "\n"
	if strings.Replace(string(main), added, "", 1) != kubeadmConfig {
		t.Errorf("the main file changed by more than the imports line:\n%s", main)
	}
	st, _ := os.Stat(n.o.ConfigFile)
	if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != 0o600 || sys.Uid != 1234 || sys.Gid != 5678 {
		t.Errorf("the main file is now %v %d:%d, want 0600 1234:5678", st.Mode().Perm(), sys.Uid, sys.Gid)
	}
	eff := n.effective(t)
	runtimes := lookup(eff, "plugins", criRuntime, "containerd", "runtimes")
	for _, class := range []string{"mk-net", "mk-web"} {
		want := cloneDoc(runtimes["runc"].(map[string]any))
		want["options"].(map[string]any)["BinaryName"] = n.o.classLink(class)
		if got := runtimes[class]; !reflect.DeepEqual(got, want) {
			t.Errorf("handler %s as containerd merges it:\n%v\nwant the default handler with the wrapper:\n%v", class, got, want)
		}
		if target, _ := os.Readlink(n.o.classLink(class)); target != n.o.wrapperPath() {
			t.Errorf("%s links to %q, want %s", n.o.classLink(class), target, n.o.wrapperPath())
		}
		data, _ := os.ReadFile(n.o.classLink(class) + ".json")
		e, err := runtimewrap.ParseEntry("entry", data)
		if err != nil || e != (runtimewrap.Entry{Class: class, Runtime: "/usr/local/sbin/runc", StateDir: "/var/lib/mk"}) {
			t.Errorf("entry of %s: %+v, %v", class, e, err)
		}
	}
	if _, ok := runtimes["default"]; ok {
		t.Error("the default class got a handler")
	}
	if fi, err := os.Stat(n.o.wrapperPath()); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("wrapper %v, %v: want 0755", fi, err)
	}

	again, err := Configure(n.o, []string{"mk-net", "mk-web"}, "/proc")
	if err != nil || len(again.Changes) != 0 {
		t.Errorf("a second configure: %v, changes %+v", err, again.Changes)
	}

	n.unconfigure(t)
	if after := n.snapshot(t); !reflect.DeepEqual(after, before) {
		t.Errorf("after unconfigure:\n%v\nwant the node as before configure:\n%v", after, before)
	}
}

// TestConfigureContainerdCases: where the main file already imports the drop-in it stays as
// it is; with no main file, configure creates one and unconfigure removes it; a class dropped
// from the config loses its handler and files; NRI disabled is enabled in the drop-in; a class
// handler an earlier mountkeeper wrote into the main file (with its base spec) is overridden.
func TestConfigureContainerdCases(t *testing.T) {
	t.Run("imports cover the drop-in", func(t *testing.T) {
		n := newNode(t, "containerd")
		src := "version = 3\nimports = ['conf.d/*.toml']\n"
		n.write(t, n.o.ConfigFile, src, 0o644)
		n.configure(t, "mk")
		if main, _ := os.ReadFile(n.o.ConfigFile); string(main) != src {
			t.Errorf("main file changed:\n%s", main)
		}
		if _, err := os.Stat(n.o.DropIn); err != nil {
			t.Error(err)
		}
	})
	t.Run("a class dropped", func(t *testing.T) {
		n := newNode(t, "containerd")
		n.write(t, n.o.ConfigFile, kubeadmConfig, 0o644)
		n.configure(t, "mk-a", "mk-b")
		n.configure(t, "mk-a")
		runtimes := lookup(n.effective(t), "plugins", criRuntime, "containerd", "runtimes")
		if _, ok := runtimes["mk-b"]; ok {
			t.Error("mk-b still has a handler")
		}
		for _, p := range []string{n.o.classLink("mk-b"), n.o.classLink("mk-b") + ".json"} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s is still there", p)
			}
		}
		if _, err := os.Lstat(n.o.classLink("mk-a")); err != nil {
			t.Error(err)
		}
	})
	t.Run("NRI disabled, an earlier mountkeeper's handler", func(t *testing.T) {
		n := newNode(t, "containerd")
		n.write(t, n.o.ConfigFile, kubeadmConfig+`
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.mk]
  runtime_type = 'io.containerd.runc.v2'
  base_runtime_spec = '/etc/mountkeeper/containerd/mk.json'
[plugins.'io.containerd.nri.v1.nri']
  disable = true
  socket_path = '/run/nri/nri.sock'
`, 0o644)
		p := n.configure(t, "mk")
		eff := n.effective(t)
		if nri := lookup(eff, "plugins", "io.containerd.nri.v1.nri"); nri["disable"] != false || nri["socket_path"] != "/run/nri/nri.sock" {
			t.Errorf("NRI %v: want enabled, its socket kept", nri)
		}
		h := lookup(eff, "plugins", criRuntime, "containerd", "runtimes", "mk")
		if h["base_runtime_spec"] != "" || lookup(h, "options")["SystemdCgroup"] != true {
			t.Errorf("handler %v: want no base spec, the default's options", h)
		}
		if !strings.Contains(strings.Join(p.Notes, "\n"), "base_runtime_spec") {
			t.Errorf("notes %q: want one naming the overridden key", p.Notes)
		}
	})
}

func TestConfigureRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, main string
		classes    []string
		want       string
	}{
		{"no main file", "", []string{"mk"}, "config.toml does not exist: containerd on this node runs with another file"},
		{"version 1", "[plugins.cri]\n", []string{"mk"}, "has version none (version 1): mountkeeper configures versions 2 to 4"},
		{"not TOML", "version = = 3\n", []string{"mk"}, "parse"},
		{"a default handler of another type", "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\nruntime_type = 'io.containerd.runsc.v1'\n", []string{"mk"}, `runtime_type "io.containerd.runsc.v1"`},
		{"a class named like the default handler", "version = 3\n", []string{"runc"}, "has the name of the default runtime handler"},
		{"an import of version 1", "version = 3\nimports = ['old.toml']\n", []string{"mk"}, "old.toml has version none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "containerd")
			if tc.main != "" {
				n.write(t, n.o.ConfigFile, tc.main, 0o644)
			}
			n.write(t, filepath.Join(filepath.Dir(n.o.ConfigFile), "old.toml"), "[plugins.cri]\n", 0o644)
			before := n.snapshot(t)
			if _, err := Configure(n.o, tc.classes, "/proc"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Configure: %v, want %q", err, tc.want)
			}
			if !reflect.DeepEqual(n.snapshot(t), before) {
				t.Error("a refused configure changed the node")
			}
		})
	}
}

// TestHandlerClasses: class names become runtime handler names, config keys and file names:
// only RFC 1123 labels pass, with an error that says so.
func TestHandlerClasses(t *testing.T) {
	for _, tc := range []struct {
		class string
		ok    bool
	}{
		{"mk-web", true}, {"a", true}, {"x1", true},
		{"../../x", false}, {"Mk", false}, {"mk_web", false}, {"-mk", false}, {"mk.web", false}, {strings.Repeat("a", 64), false},
	} {
		cfg := classConfig(t)
		cfg.RuntimeClasses[tc.class] = cfg.RuntimeClasses["default"]
		got, err := HandlerClasses(cfg)
		switch {
		case tc.ok && (err != nil || !reflect.DeepEqual(got, []string{tc.class})):
			t.Errorf("%q: %v, %v", tc.class, got, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "RFC 1123 label") || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.class))):
			t.Errorf("%q: %v, want an error naming it and the rule", tc.class, err)
		}
	}
}

const crioMain = `# CRI-O of this node
[crio.runtime]
default_runtime = "runc"
cgroup_manager = "systemd"

[crio.runtime.runtimes.runc]
runtime_path = "/usr/local/bin/runc"
runtime_type = "oci"
runtime_root = "/run/runc"
monitor_path = "/usr/libexec/crio/conmon"
monitor_env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"]
allowed_annotations = ["io.kubernetes.cri-o.Devices"]
`

// TestConfigureCRIO: CRI-O's class handlers are copies of its default handler with the wrapper
// as runtime_path, in a drop-in of mountkeeper's own; the operator's files do not change, and
// unconfigure gives the node back byte for byte.
func TestConfigureCRIO(t *testing.T) {
	n := newNode(t, "crio")
	n.write(t, n.o.ConfigFile, crioMain, 0o600)
	n.write(t, filepath.Join(n.o.ConfigDir, "10-nri.conf"), "[crio.nri]\nenable_nri = false\n", 0o644)
	before := n.snapshot(t)
	n.configure(t, "mk")
	eff, err := loadCRIO(n.o.ConfigFile, n.o.ConfigDir, "")
	if err != nil {
		t.Fatal(err)
	}
	runtimes := lookup(eff, "crio", "runtime", "runtimes")
	want := cloneDoc(runtimes["runc"].(map[string]any))
	want["runtime_path"] = n.o.classLink("mk")
	if !reflect.DeepEqual(runtimes["mk"], want) {
		t.Errorf("handler mk %v, want %v", runtimes["mk"], want)
	}
	if on := lookup(eff, "crio", "nri")["enable_nri"]; on != true {
		t.Errorf("enable_nri %v: want the drop-in (read last) to enable it", on)
	}
	data, _ := os.ReadFile(n.o.classLink("mk") + ".json")
	if e, err := runtimewrap.ParseEntry("", data); err != nil || e.Runtime != "/usr/local/bin/runc" {
		t.Errorf("entry %+v, %v", e, err)
	}
	for p, s := range before {
		if now := n.snapshot(t)[p]; now != s && !strings.HasSuffix(p, "crio.conf.d") {
			t.Errorf("%s changed: %s", p, now)
		}
	}
	n.unconfigure(t)
	if after := n.snapshot(t); !reflect.DeepEqual(after, before) {
		t.Errorf("after unconfigure %v, want %v", after, before)
	}
}

// fakeRestarter records restarts.
type fakeRestarter struct{ units []string }

func (f *fakeRestarter) Restart(_ context.Context, unit string) error {
	f.units = append(f.units, unit)
	return nil
}

func TestRestartIfNeeded(t *testing.T) {
	changed := Plan{Options: Options{Runtime: "containerd"}, Changes: []Change{{Path: "/etc/x", New: []byte("x"), Config: true}}}
	wrapperOnly := Plan{Options: Options{Runtime: "crio"}, Changes: []Change{{Path: "/opt/x", New: []byte("x")}}}
	k3sAgent := changed
	k3sAgent.Options.UnitName = "k3s-agent"
	for _, tc := range []struct {
		name    string
		plan    Plan
		restart RestartMode
		units   []string
		line    string
	}{
		{"config changed, --restart=systemd", changed, RestartSystemd, []string{"containerd"}, "restarted containerd (systemctl restart containerd)"},
		{"config changed, k3s agent, --restart=systemd", k3sAgent, RestartSystemd, []string{"k3s-agent"}, "restarted containerd (systemctl restart k3s-agent)"},
		{"config changed, --restart=none", changed, RestartNone, nil, "restart needed: containerd reads its config only at start: run `systemctl restart containerd`"},
		{"config changed, k3s agent, --restart=none", k3sAgent, RestartNone, nil, "restart needed: containerd reads its config only at start: run `systemctl restart k3s-agent`"},
		{"only the wrapper changed", wrapperOnly, RestartSystemd, nil, ""},
	} {
		r := &fakeRestarter{}
		line, err := RestartIfNeeded(context.Background(), tc.plan, r, tc.restart)
		if err != nil || !reflect.DeepEqual(r.units, tc.units) || !strings.HasPrefix(line, tc.line) || (tc.line == "") != (line == "") {
			t.Errorf("%s: restarted %q, said %q (%v); want %q, %q", tc.name, r.units, line, err, tc.units, tc.line)
		}
	}
}

// TestRestartUnit: the unit --restart=systemd restarts, per runtime and distribution, from the
// unit files the node has.
func TestRestartUnit(t *testing.T) {
	for _, tc := range []struct {
		runtime, distribution string
		unitFiles             []string
		want                  string
	}{
		{"containerd", "kubeadm", []string{"containerd"}, "containerd"},
		{"containerd", "kind", nil, "containerd"},
		{"containerd", "k3s", []string{"k3s"}, "k3s"},
		{"containerd", "k3s", []string{"k3s-agent"}, "k3s-agent"},
		{"containerd", "k3s", nil, "k3s"},
		{"containerd", "rke2", []string{"rke2-server"}, "rke2-server"},
		{"containerd", "rke2", []string{"rke2-agent"}, "rke2-agent"},
		{"containerd", "microk8s", nil, "snap.microk8s.daemon-containerd"},
		{"crio", "kubeadm", []string{"containerd"}, "crio"},
	} {
		d, err := ResolveDistribution(tc.distribution, func(string) bool { return false })
		if err != nil {
			t.Fatal(err)
		}
		exists := func(u string) bool { return slices.Contains(tc.unitFiles, u) }
		got := RestartUnit(tc.runtime, d, exists)
		if got != tc.want {
			t.Errorf("%s on %s with unit files %v: restarts %q, want %q", tc.runtime, tc.distribution, tc.unitFiles, got, tc.want)
		}
		if o := (Options{Runtime: tc.runtime}).ForDistribution(d, got); o.Unit() != tc.want {
			t.Errorf("%s on %s: the plan's unit is %q, want %q", tc.runtime, tc.distribution, o.Unit(), tc.want)
		}
	}
}

func TestParseRestartMode(t *testing.T) {
	for in, want := range map[string]RestartMode{"none": RestartNone, "false": RestartNone, "systemd": RestartSystemd, "true": RestartSystemd} {
		if got, err := ParseRestartMode(in); err != nil || got != want {
			t.Errorf("ParseRestartMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseRestartMode("always"); err == nil || !strings.Contains(err.Error(), "none (print what to restart) or systemd") {
		t.Errorf("ParseRestartMode(always) = %v, want a refusal naming the modes", err)
	}
}

// TestDropInIsTOML: the drop-in parses, carries the main file's version, and says where it
// came from.
func TestDropInIsTOML(t *testing.T) {
	n := newNode(t, "containerd")
	n.write(t, n.o.ConfigFile, strings.Replace(kubeadmConfig, "version = 3", "version = 4", 1), 0o644)
	n.configure(t, "mk")
	data, _ := os.ReadFile(n.o.DropIn)
	var doc struct{ Version int }
	if err := toml.Unmarshal(data, &doc); err != nil || doc.Version != 4 || !bytes.HasPrefix(data, []byte("# Written by `mountkeeper runtime configure`")) {
		t.Errorf("drop-in (%v):\n%s", err, data)
	}
	var e runtimewrap.Entry
	raw, _ := os.ReadFile(n.o.classLink("mk") + ".json")
	if json.Unmarshal(raw, &e) != nil || e.Class != "mk" {
		t.Errorf("entry %s", raw)
	}
}
