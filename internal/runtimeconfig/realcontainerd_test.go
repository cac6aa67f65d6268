package runtimeconfig

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// kindConfig is a containerd config as kind's node images carry it on containerd 2.x: version
// 2, the CRI plugin under its version-2 ID, a base spec and systemd cgroups on runc, and a
// second handler of kind's own.
const kindConfig = `version = 2

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = false
  sandbox_image = "registry.k8s.io/pause:3.10"
  tolerate_missing_hugetlb_controller = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    discard_unpacked_layers = true
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      base_runtime_spec = "/etc/containerd/cri-base.json"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler]
      runtime_type = "io.containerd.runc.v2"
      base_runtime_spec = "/etc/containerd/cri-base.json"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler.options]
        SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"
`

// realContainerd is the containerd 2.4.2 test/tools/install.sh builds.
func realContainerd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(cmp.Or(os.Getenv("MOUNTKEEPER_BIN"), filepath.Join(cmp.Or(os.Getenv("MOUNTKEEPER_CACHE"), "/var/cache/mountkeeper-test"), "bin")), "containerd")
	testenv.Require(t, bin)
	return bin
}

// dumpHandlers is what the real containerd loads from configFile (config dump reads the
// files as containerd does at start, migrations and imports included): its CRI runtime
// handlers.
func dumpHandlers(t *testing.T, containerd, configFile string) map[string]any {
	t.Helper()
	o := Options{Runtime: "containerd", ConfigFile: configFile}
	out, err := RuntimeCommand{Binary: containerd}.Read(o)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := parseDoc(out)
	if err != nil {
		t.Fatal(err)
	}
	return lookup(doc, containerdRuntimes...)
}

// TestConfigureKindVersion2: on a kind-style node (containerd 2.x with a version-2 config),
// configure reads what containerd runs (config dump) and writes its drop-in in version 2,
// under the version-2 plugin ID; the real containerd then loads a class handler that is the
// default handler (base spec, systemd cgroups) with the class link as its runc, and the
// operator's handlers unchanged. Reading the files alone gives the same handlers; a second
// run changes nothing.
func TestConfigureKindVersion2(t *testing.T) {
	containerd := realContainerd(t)
	n := newNode(t, "containerd")
	n.write(t, n.o.ConfigFile, kindConfig, 0o644)
	before := dumpHandlers(t, containerd, n.o.ConfigFile)
	n.o.Effective = RuntimeCommand{Binary: containerd}

	p := n.configure(t, "mk-a")
	if len(p.Notes) > 0 {
		t.Errorf("notes %q: want none (the effective config was read)", p.Notes)
	}
	dropIn, err := os.ReadFile(n.o.DropIn)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dropIn), "version = 2\n") || !strings.Contains(string(dropIn), "[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.mk-a]") || strings.Contains(string(dropIn), criRuntime) {
		t.Errorf("drop-in, want version 2 and the version-2 plugin ID:\n%s", dropIn)
	}
	after := dumpHandlers(t, containerd, n.o.ConfigFile)
	h, _ := after["mk-a"].(map[string]any)
	if h["runtime_type"] != runcShim || h["base_runtime_spec"] != "/etc/containerd/cri-base.json" || lookup(h, "options")["SystemdCgroup"] != true || lookup(h, "options")["BinaryName"] != n.o.classLink("mk-a") {
		t.Errorf("containerd loads mk-a as %v: want the default handler with BinaryName %s", h, n.o.classLink("mk-a"))
	}
	for _, name := range []string{"runc", "test-handler"} {
		if !reflect.DeepEqual(after[name], before[name]) {
			t.Errorf("handler %s: %v, before configure %v", name, after[name], before[name])
		}
	}
	if p := n.configure(t, "mk-a"); len(p.Changes) > 0 {
		t.Errorf("a second configure changed %v", p.Changes)
	}

	// The files alone: the drop-in differs (the effective config spells out defaults), the
	// handler containerd runs does not.
	files := newNode(t, "containerd")
	files.write(t, files.o.ConfigFile, kindConfig, 0o644)
	files.configure(t, "mk-a")
	h2 := dumpHandlers(t, containerd, files.o.ConfigFile)["mk-a"].(map[string]any)
	lookup(h2, "options")["BinaryName"] = n.o.classLink("mk-a")
	if !reflect.DeepEqual(asRun(h), asRun(h2)) {
		t.Errorf("handler from the effective config %v, from the files %v", asRun(h), asRun(h2))
	}
}

// asRun is a handler as the CRI plugin runs it: zero values are unset, and an unset sandboxer
// is podsandbox (internal/cri/config's ValidateRuntimeConfig).
func asRun(h map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range h {
		if t, ok := v.(map[string]any); ok {
			v = asRun(t)
		}
		if z, ok := zeroOf(v); ok && reflect.DeepEqual(v, z) {
			continue
		}
		out[k] = v
	}
	if out["sandboxer"] == nil {
		out["sandboxer"] = "podsandbox"
	}
	return out
}

// TestConfigureReadsTheDefaultsContainerdRuns: a config that does not name the default
// handler: the files alone leave its options unknown (a note says so), the effective config
// has containerd's built-in one, which the class handler copies. NRI, disabled in the file, is
// enabled by the drop-in, also at the next run, when the effective config says enabled.
func TestConfigureReadsTheDefaultsContainerdRuns(t *testing.T) {
	containerd := realContainerd(t)
	n := newNode(t, "containerd")
	const main = "version = 3\nimports = ['conf.d/*.toml']\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n  SystemdCgroup = true\n[plugins.'io.containerd.nri.v1.nri']\n  disable = true\n"
	n.write(t, n.o.ConfigFile, main, 0o644)
	n.o.Effective = RuntimeCommand{Binary: containerd}
	p := n.configure(t, "mk-a")
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "NRI is disabled") {
		t.Errorf("notes %q: want one, NRI enabled", p.Notes)
	}
	// The effective config now has the drop-in's NRI switch and handler: they are not taken
	// for the node's own.
	if p := n.configure(t, "mk-a"); len(p.Changes) > 0 {
		t.Errorf("a second configure: %s", p.Diff())
	}
	h := dumpHandlers(t, containerd, n.o.ConfigFile)["mk-a"].(map[string]any)
	if h["sandboxer"] != "podsandbox" || lookup(h, "options")["SystemdCgroup"] != true {
		t.Errorf("mk-a %v: want the built-in default's sandboxer and the file's SystemdCgroup", h)
	}
	// An operator's key on the class's handler outside the drop-in does not reach it: the
	// drop-in, loaded last, spells out every key of the default handler.
	n.write(t, filepath.Join(filepath.Dir(n.o.DropIn), "50-operator.toml"), "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.mk-a]\n  pod_annotations = ['x']\n", 0o644)
	n.configure(t, "mk-a")
	if h := dumpHandlers(t, containerd, n.o.ConfigFile)["mk-a"].(map[string]any); len(anySlice(h["pod_annotations"])) != 0 {
		t.Errorf("mk-a %v: want the drop-in's empty pod_annotations over the operator's", h)
	}
}

// TestFragmentAppliedByHand: the fragment printed for a config the OS owns, put there by hand
// (a file the main config imports, as Talos merges its CRI customization), gives the real
// containerd the same class handlers as configure on the same node; configure's plan is not
// needed for it and nothing is written.
func TestFragmentAppliedByHand(t *testing.T) {
	containerd := realContainerd(t)
	for _, main := range []string{kubeadmConfig, kindConfig} {
		configured := newNode(t, "containerd")
		configured.write(t, configured.o.ConfigFile, main, 0o644)
		configured.o.Effective = RuntimeCommand{Binary: containerd}
		configured.configure(t, "mk-a", "mk-b")
		want := dumpHandlers(t, containerd, configured.o.ConfigFile)

		byHand := newNode(t, "containerd")
		byHand.o.InstallDir = configured.o.InstallDir // the handlers name the same links
		byHand.o.Effective = RuntimeCommand{Binary: containerd}
		byHand.write(t, byHand.o.ConfigFile, main, 0o644)
		before := byHand.snapshot(t)
		fragment, notes, err := Fragment(byHand.o, []string{"mk-a", "mk-b"})
		if err != nil {
			t.Fatal(err)
		}
		if len(notes) > 0 {
			t.Errorf("notes %q", notes)
		}
		if after := byHand.snapshot(t); !reflect.DeepEqual(after, before) {
			t.Errorf("Fragment wrote to the node: %v", after)
		}
		part := filepath.Join(byHand.root, "etc/cri/conf.d/20-customization.part")
		byHand.write(t, part, string(fragment), 0o644)
		byHand.write(t, byHand.o.ConfigFile, strings.Replace(main, "\n", fmt.Sprintf("\nimports = [%q]\n", part), 1), 0o644)
		got := dumpHandlers(t, containerd, byHand.o.ConfigFile)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("handlers with the fragment by hand:\n%v\nwith configure:\n%v", got, want)
		}
	}
}
