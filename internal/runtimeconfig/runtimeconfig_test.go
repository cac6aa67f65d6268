package runtimeconfig

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/mountkeeper/mountkeeper/configs"
)

func testConfig(t *testing.T) *configs.Config {
	t.Helper()
	cfg, err := configs.Parse([]byte(`stateDir: /var/lib/mk
runtimeClasses:
  default:
    mounts: [{source: /srv/d, destination: /d}]
  mk-net:
    mounts: [{source: /srv/n, destination: /n}]
  mk-web:
    mounts: [{source: /srv/w, destination: /w}]
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var opts = Options{HookPath: "/usr/local/bin/mountkeeper", BaseSpecDir: "/etc/mountkeeper/containerd"}

func TestContainerd(t *testing.T) {
	current := []byte(`version = 3
# the operator's runc settings
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.mk-web]
  runtime_type = 'io.containerd.runc.v2'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.mk-web.options]
    BinaryName = '/opt/runc'
[plugins.'io.containerd.nri.v1.nri']
  disable = true
  socket_path = '/var/run/nri/nri.sock'
`)
	res, err := Containerd(current, testConfig(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Plugins struct {
			NRI struct {
				Disable    bool   `toml:"disable"`
				SocketPath string `toml:"socket_path"`
			} `toml:"io.containerd.nri.v1.nri"`
			CRI struct {
				Containerd struct {
					Runtimes map[string]struct {
						RuntimeType string         `toml:"runtime_type"`
						BaseSpec    string         `toml:"base_runtime_spec"`
						Options     map[string]any `toml:"options"`
					} `toml:"runtimes"`
				} `toml:"containerd"`
			} `toml:"io.containerd.cri.v1.runtime"`
		} `toml:"plugins"`
	}
	if err := toml.Unmarshal(res.Config, &doc); err != nil {
		t.Fatalf("output is not TOML: %v\n%s", err, res.Config)
	}
	if doc.Plugins.NRI.Disable || doc.Plugins.NRI.SocketPath != "/var/run/nri/nri.sock" {
		t.Errorf("NRI section %+v: want enabled, socket kept", doc.Plugins.NRI)
	}
	rts := doc.Plugins.CRI.Containerd.Runtimes
	if _, ok := rts["default"]; ok {
		t.Error(`the default class got a runtime handler with a guard: it would hold every pod without a runtime class`)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], `"default": no guard`) {
		t.Errorf("notes %q: want one saying the default class has no guard", res.Notes)
	}
	for _, class := range []string{"mk-net", "mk-web"} {
		rt := rts[class]
		want := "/etc/mountkeeper/containerd/" + class + ".json"
		if rt.RuntimeType != "io.containerd.runc.v2" || rt.BaseSpec != want {
			t.Errorf("handler %s: %+v, want runc v2 with base spec %s", class, rt, want)
		}
		var spec struct {
			Process *struct{ Terminal bool } `json:"process"`
			Hooks   map[string][]struct {
				Path string
				Args []string
			} `json:"hooks"`
		}
		if err := json.Unmarshal(res.Files[want], &spec); err != nil {
			t.Fatalf("base spec of %s: %v", class, err)
		}
		hooks := spec.Hooks["createRuntime"]
		if spec.Process == nil || spec.Process.Terminal || len(spec.Hooks) != 1 || len(hooks) != 1 ||
			hooks[0].Path != opts.HookPath || strings.Join(hooks[0].Args, " ") != "mountkeeper hook guard --runtime-class "+class+" --state-dir /var/lib/mk" {
			t.Errorf("base spec of %s: %+v, want the guard as its only hook", class, spec)
		}
	}
	if rts["mk-web"].Options["BinaryName"] != "/opt/runc" {
		t.Errorf("the operator's handler options were lost: %+v", rts["mk-web"].Options)
	}

	again, err := Containerd(res.Config, testConfig(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Config, res.Config) {
		t.Errorf("a second run changed the config:\nfirst:\n%s\nsecond:\n%s", res.Config, again.Config)
	}
	for p, b := range res.Files {
		if !bytes.Equal(again.Files[p], b) {
			t.Errorf("a second run changed %s", p)
		}
	}
}

func TestContainerdRefuses(t *testing.T) {
	for _, tc := range []struct{ name, current, want string }{
		{"version 2", "version = 2\n", "migrate it first"},
		{"not TOML", "version = = 3\n", "parse the containerd config"},
		{"a handler with a base spec of its own", "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.mk-net]\nbase_runtime_spec = '/etc/other/spec.json'\n",
			`already has base_runtime_spec /etc/other/spec.json: add this createRuntime hook to it yourself`},
	} {
		if _, err := Containerd([]byte(tc.current), testConfig(t), opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestCRIO(t *testing.T) {
	res, err := CRIO(testConfig(t), "/usr/bin/runc")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Crio struct {
			NRI struct {
				Enable bool `toml:"enable_nri"`
			} `toml:"nri"`
			Runtime struct {
				Runtimes map[string]map[string]string `toml:"runtimes"`
			} `toml:"runtime"`
		} `toml:"crio"`
	}
	if err := toml.Unmarshal(res.Config, &doc); err != nil {
		t.Fatalf("%v\n%s", err, res.Config)
	}
	rts := doc.Crio.Runtime.Runtimes
	if !doc.Crio.NRI.Enable || len(rts) != 2 || rts["mk-net"]["runtime_path"] != "/usr/bin/runc" {
		t.Errorf("drop-in %s: want NRI on and handlers mk-net, mk-web running /usr/bin/runc", res.Config)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "no guard") {
		t.Errorf("notes %q: want one saying CRI-O has no guard", res.Notes)
	}
}
