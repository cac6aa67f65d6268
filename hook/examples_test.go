package hook

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// The install examples in configs/examples must stay working: these tests check that each one
// parses and has the shape the docs promise. The e2e suite runs the containerd and runc ones.

const (
	examplesDir   = "../configs/examples"
	exampleClass  = "runc-mountkeeper"
	exampleBinary = "/usr/local/bin/mountkeeper-hook"
)

func readExample(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examplesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func decodeStrict(t *testing.T, data []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode: %v", err)
	}
}

// checkHookEntry checks a hook entry runs `mountkeeper hook <stage>` with --runtime-class of
// the example class, as the command line of cmd/mountkeeper parses it.
func checkHookEntry(t *testing.T, h oci.Hook, stage Stage) {
	t.Helper()
	if h.Path != exampleBinary {
		t.Errorf("hook path %q, want %q", h.Path, exampleBinary)
	}
	if len(h.Args) < 3 || h.Args[0] != "mountkeeper" || h.Args[1] != "hook" {
		t.Fatalf("hook args %q do not start with mountkeeper hook <stage>", h.Args)
	}
	if st, err := ParseStage(h.Args[2]); err != nil || st != stage {
		t.Errorf("hook args %q: stage %q, want %q (%v)", h.Args, h.Args[2], stage, err)
	}
	if class := flagValue(h.Args[3:], "--runtime-class"); class != exampleClass {
		t.Errorf("hook args %q: --runtime-class %q, want %q", h.Args, class, exampleClass)
	}
	if h.Timeout == nil || *h.Timeout <= 0 {
		t.Errorf("hook has no timeout: a hung hook would hang container creation")
	}
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func TestExampleConfig(t *testing.T) {
	cfg, err := configs.Parse(readExample(t, "config.yaml"))
	if err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	if _, _, ok := cfg.Class(exampleClass); !ok {
		t.Errorf("config.yaml has no class %q: %v", exampleClass, cfg.ClassNames())
	}
}

func TestExampleContainerdBaseSpec(t *testing.T) {
	data := readExample(t, "containerd/base-runtime-spec.json")
	var spec oci.Spec
	decodeStrict(t, data, &spec)
	if spec.Process == nil || spec.Process.Terminal {
		t.Error(`process.terminal must be false: true breaks CRI containers ("cannot allocate tty if runc will detach")`)
	}
	if spec.Root == nil || spec.Root.Readonly {
		t.Error("root.readonly must be unset: containerd would keep it for every container of the handler")
	}
	if spec.Linux == nil || !hasMountNamespace(spec.Linux.Namespaces) {
		t.Error(`linux.namespaces lacks "mount": the hook refuses such a container`)
	}
	if spec.Hooks == nil || len(spec.Hooks.CreateRuntime) != 1 || len(spec.Hooks.Prestart) != 0 {
		t.Fatalf("want exactly one createRuntime hook, got %+v", spec.Hooks)
	}
	checkHookEntry(t, spec.Hooks.CreateRuntime[0], CreateRuntime)
}

// TestExampleContainerdBaseSpecFromRuncSpec re-derives the base spec from `runc spec` and the
// edits configs/examples/README.md lists, so the example stays what the docs say it is.
func TestExampleContainerdBaseSpecFromRuncSpec(t *testing.T) {
	runc := os.Getenv("MOUNTKEEPER_BIN")
	if runc == "" {
		runc = "/var/cache/mountkeeper-test/bin"
	}
	runc = filepath.Join(runc, "runc")
	if _, err := os.Stat(runc); err != nil {
		testenv.Skip(t, "no runc at %s (test/tools/install.sh builds it)", runc)
	}
	dir := t.TempDir()
	if out, err := exec.Command(runc, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	var want oci.Spec
	decodeStrict(t, readFile(t, filepath.Join(dir, "config.json")), &want)
	// The edits configs/examples/README.md lists.
	want.Process.Terminal = false
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
		"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
	want.Process.Capabilities.Bounding, want.Process.Capabilities.Effective, want.Process.Capabilities.Permitted = caps, caps, caps
	want.Root.Readonly = false
	want.Hostname = ""
	var env []string
	for _, e := range want.Process.Env {
		if !strings.HasPrefix(e, "TERM=") {
			env = append(env, e)
		}
	}
	want.Process.Env = env
	var got oci.Spec
	decodeStrict(t, readExample(t, "containerd/base-runtime-spec.json"), &got)
	want.Hooks = got.Hooks
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("base-runtime-spec.json is not runc spec plus the README's edits\ngot:\n%s\nwant:\n%s", g, w)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestExampleContainerdConfig(t *testing.T) {
	toml := string(readExample(t, "containerd/config.toml"))
	section := `[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.` + exampleClass + `]`
	for _, want := range []string{
		"version = 3",
		section,
		"runtime_type = 'io.containerd.runc.v2'",
		"base_runtime_spec = '/etc/mountkeeper/containerd/base-runtime-spec.json'",
		`[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.` + exampleClass + `.options]`,
	} {
		if !strings.Contains(toml, want) {
			t.Errorf("config.toml lacks %s", want)
		}
	}
	rc := string(readExample(t, "containerd/kubernetes-runtimeclass.yaml"))
	if !regexp.MustCompile(`(?m)^handler: ` + exampleClass + `$`).MatchString(rc) {
		t.Errorf("kubernetes-runtimeclass.yaml does not name handler %s", exampleClass)
	}
}

func TestExampleRunc(t *testing.T) {
	var doc struct {
		Hooks oci.Hooks `json:"hooks"`
	}
	decodeStrict(t, readExample(t, "runc/config-hooks.json"), &doc)
	if len(doc.Hooks.CreateRuntime) != 1 {
		t.Fatalf("want one createRuntime hook, got %+v", doc.Hooks)
	}
	checkHookEntry(t, doc.Hooks.CreateRuntime[0], CreateRuntime)
}

// hooksDFile is the hooks.d schema 1.0.0 (containers/common pkg/hooks).
type hooksDFile struct {
	Version string   `json:"version"`
	Hook    oci.Hook `json:"hook"`
	When    struct {
		Always        *bool             `json:"always,omitempty"`
		Annotations   map[string]string `json:"annotations,omitempty"`
		Commands      []string          `json:"commands,omitempty"`
		HasBindMounts *bool             `json:"hasBindMounts,omitempty"`
	} `json:"when"`
	Stages []string `json:"stages"`
}

func TestExampleHooksD(t *testing.T) {
	// The stages CRI-O accepts; podman adds its extension stage precreate.
	crio := map[string]bool{"prestart": true, "createRuntime": true, "createContainer": true, "startContainer": true, "poststart": true, "poststop": true}
	tests := []struct {
		file   string
		stage  Stage
		stages map[string]bool
	}{
		{file: "hooks.d/mountkeeper-runc-mountkeeper.json", stage: Prestart, stages: crio},
		{file: "podman-hooks.d/mountkeeper-runc-mountkeeper-precreate.json", stage: Precreate, stages: map[string]bool{"precreate": true}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var h hooksDFile
			decodeStrict(t, readExample(t, tt.file), &h)
			if h.Version != "1.0.0" {
				t.Errorf("version %q, want 1.0.0", h.Version)
			}
			if !filepath.IsAbs(h.Hook.Path) {
				t.Errorf("hook.path %q is not absolute", h.Hook.Path)
			}
			checkHookEntry(t, h.Hook, tt.stage)
			if len(h.Stages) != 1 || h.Stages[0] != string(tt.stage) || !tt.stages[h.Stages[0]] {
				t.Errorf("stages %q, want [%s]", h.Stages, tt.stage)
			}
			if len(h.When.Annotations) == 0 {
				t.Fatal("when.annotations is empty: the hook would not be limited to the class's containers")
			}
			for k, v := range h.When.Annotations {
				kre, err1 := regexp.Compile(k)
				vre, err2 := regexp.Compile(v)
				if err1 != nil || err2 != nil {
					t.Fatalf("when.annotations %q: %q: %v %v", k, v, err1, err2)
				}
				if !kre.MatchString("mountkeeper.io/runtime-class") || kre.MatchString("xmountkeeper.io/runtime-class") ||
					!vre.MatchString(exampleClass) || vre.MatchString(exampleClass+"-other") {
					t.Errorf("when.annotations %q: %q does not select exactly mountkeeper.io/runtime-class=%s", k, v, exampleClass)
				}
			}
		})
	}
}
