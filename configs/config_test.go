package configs_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/specmod"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// oneMount is a config with class "fast" holding one mount given as a YAML flow mapping.
func oneMount(mount string) string {
	return "runtimeClasses:\n  fast:\n    mounts:\n      - " + mount + "\n"
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings the error must contain, each
	}{
		{
			name: "unknown top-level key",
			yaml: "kubeletRot: /var/lib/kubelet\n" + oneMount("{source: /srv/a, destination: /a}"),
			want: []string{"field kubeletRot not found at the top level"},
		},
		{
			name: "unknown mount key",
			yaml: oneMount("{source: /srv/a, destination: /a, propagaton: rslave}"),
			want: []string{"line 4: field propagaton not found in type configs.Mount"},
		},
		{
			name: "unknown class key",
			yaml: "runtimeClasses:\n  fast:\n    mount:\n      - {source: /srv/a, destination: /a}\n",
			want: []string{"field mount not found in type configs.RuntimeClass"},
		},
		{
			name: "empty file",
			yaml: "",
			want: []string{"config is empty"},
		},
		{
			name: "comments only",
			yaml: "# nothing here yet\n",
			want: []string{"config is empty"},
		},
		{
			name: "two YAML documents",
			yaml: oneMount("{source: /srv/a, destination: /a}") + "---\n" + oneMount("{source: /srv/b, destination: /b}"),
			want: []string{"config has more than one YAML document: keep one"},
		},
		{
			name: "duplicate class key",
			yaml: oneMount("{source: /srv/a, destination: /a}") + "  fast:\n    mounts:\n      - {source: /srv/b, destination: /b}\n",
			want: []string{`line 5: mapping key "fast" already defined at line 2`},
		},
		{
			name: "duplicate mount key",
			yaml: oneMount("{source: /srv/a, destination: /a, source: /srv/b}"),
			want: []string{`mapping key "source" already defined`},
		},
		{
			name: "YAML syntax error",
			yaml: oneMount("{source: /srv/a, destination: /a"),
			want: []string{"yaml: line", "did not find expected ',' or '}'"},
		},
		{
			name: "propagation as a list",
			yaml: oneMount("{source: /srv/a, destination: /a, propagation: [rslave]}"),
			want: []string{"line 4: cannot unmarshal !!seq into string"},
		},
		{
			name: "readOnly not a bool",
			yaml: oneMount("{source: /srv/a, destination: /a, readOnly: sometimes}"),
			want: []string{"cannot unmarshal !!str `sometimes` into bool"},
		},
		{
			name: "no classes and no subPath repair",
			yaml: "subPathRepair: false\nruntimeClasses: {}\n",
			want: []string{"runtimeClasses is empty and subPathRepair is false: mountkeeper would change no container"},
		},
		{
			name: "runtimeClasses null and no subPath repair",
			yaml: "subPathRepair: false\nruntimeClasses:\n",
			want: []string{"runtimeClasses is empty and subPathRepair is false"},
		},
		{
			name: "relative kubeletRoot",
			yaml: "kubeletRoot: var/lib/kubelet\n",
			want: []string{`kubeletRoot "var/lib/kubelet" must be an absolute, clean path`},
		},
		{
			name: "subPathRepair not a bool",
			yaml: "subPathRepair: maybe\n",
			want: []string{"cannot unmarshal !!str `maybe` into bool"},
		},
		{
			name: "class with empty name",
			yaml: "runtimeClasses:\n  \"\":\n    mounts:\n      - {source: /srv/a, destination: /a}\n",
			want: []string{`runtime class "": name the CRI runtime handler, or "default" for pods on the runtime's default handler`},
		},
		{
			name: "class with empty mounts list",
			yaml: "runtimeClasses:\n  fast:\n    mounts: []\n",
			want: []string{`runtime class "fast" has no mounts`},
		},
		{
			name: "class without mounts key",
			yaml: "runtimeClasses:\n  fast: {}\n",
			want: []string{`runtime class "fast" has no mounts`},
		},
		{
			name: "missing source",
			yaml: oneMount("{destination: /a}"),
			want: []string{`runtime class "fast", mount 1 (destination "/a"): source is empty: name a host path`},
		},
		{
			name: "relative source",
			yaml: oneMount("{source: srv/a, destination: /a}"),
			want: []string{`runtime class "fast", mount 1 (destination "/a"): source "srv/a" is not an absolute path`},
		},
		{
			name: "unclean source",
			yaml: oneMount("{source: /srv//a/, destination: /a}"),
			want: []string{`runtime class "fast", mount 1 (destination "/a"): source "/srv//a/" is not clean: write "/srv/a"`},
		},
		{
			name: "source with dot-dot",
			yaml: oneMount("{source: /srv/../etc, destination: /a}"),
			want: []string{`runtime class "fast", mount 1 (destination "/a"): source "/srv/../etc" contains ".."`},
		},
		{
			name: "missing destination",
			yaml: oneMount("{source: /srv/a}"),
			want: []string{`runtime class "fast", mount 1 (destination ""): destination is empty: name an absolute path in the container`},
		},
		{
			name: "relative destination",
			yaml: oneMount("{source: /srv/a, destination: data}"),
			want: []string{`runtime class "fast", mount 1 (destination "data"): destination "data" is relative`},
		},
		{
			name: "destination with dot-dot",
			yaml: oneMount("{source: /srv/a, destination: /data/../../etc}"),
			want: []string{`destination "/data/../../etc" contains "..": it could leave the container's root`},
		},
		{
			name: "destination root",
			yaml: oneMount("{source: /srv/a, destination: /}"),
			want: []string{`runtime class "fast", mount 1 (destination "/"): destination "/" would hide the container's root filesystem`},
		},
		{
			name: "destination under /proc",
			yaml: oneMount("{source: /srv/a, destination: /proc/sys}"),
			want: []string{`destination "/proc/sys" is inside /proc or /sys, which the runtime mounts`},
		},
		{
			name: "destination /sys itself",
			yaml: oneMount("{source: /srv/a, destination: /sys}"),
			want: []string{`destination "/sys" is inside /proc or /sys`},
		},
		{
			name: "destination with trailing slash",
			yaml: oneMount("{source: /srv/a, destination: /data/}"),
			want: []string{`runtime class "fast", mount 1 (destination "/data/"): destination "/data/" is not clean: write "/data"`},
		},
		{
			name: "duplicate destination in a class",
			yaml: "runtimeClasses:\n  fast:\n    mounts:\n" +
				"      - {source: /srv/a, destination: /data}\n" +
				"      - {source: /srv/b, destination: /other}\n" +
				"      - {source: /srv/c, destination: /data}\n",
			want: []string{`runtime class "fast", mount 3 (destination "/data"): destination already used by mount 1`},
		},
		{
			name: "unknown propagation",
			yaml: oneMount("{source: /srv/a, destination: /a, propagation: shared}"),
			want: []string{`runtime class "fast", mount 1 (destination "/a"): unknown propagation "shared": use rprivate (None), rslave (HostToContainer) or rshared (Bidirectional)`},
		},
		{
			name: "propagation in options",
			yaml: oneMount("{source: /srv/a, destination: /a, options: [rshared]}"),
			want: []string{`runtime class "fast", mount 1 (destination "/a"): option "rshared" sets propagation: use the propagation key instead`},
		},
		{
			name: "ro in options",
			yaml: oneMount("{source: /srv/a, destination: /a, options: [ro]}"),
			want: []string{`option "ro": use readOnly: true or false instead`},
		},
		{
			name: "bind in options",
			yaml: oneMount("{source: /srv/a, destination: /a, options: [bind]}"),
			want: []string{`option "bind" is implied: every class mount is a recursive bind`},
		},
		{
			name: "unknown option",
			yaml: oneMount("{source: /srv/a, destination: /a, options: [nosuid, size=1m]}"),
			want: []string{`runtime class "fast", mount 1 (destination "/a"): option "size=1m" is not a bind mount option`},
		},
		{
			name: "unsupported type",
			yaml: oneMount("{source: /srv/a, destination: /a, type: ext4}"),
			want: []string{`runtime class "fast", mount 1 (destination "/a"): type "ext4" is not supported: use bind (the default), nfs, nfs4, cifs, glusterfs, ceph or fuse.<program>`},
		},
		{
			name: "nfs source that is a host path",
			yaml: oneMount("{source: /srv/a, destination: /a, type: nfs}"),
			want: []string{`runtime class "fast", mount 1 (destination "/a"): nfs mount: source "/srv/a" is not of the form server:/export`},
		},
		{
			name: "network mount with a bad destination and a secret in its options",
			yaml: oneMount("{source: \"//srv/share\", destination: data, type: cifs, options: [password=hunter2, \"a,b\"]}"),
			want: []string{`destination "data" is relative`, `cifs mount: option 2 (a,b) contains a comma`},
		},
		{
			name: "fuse without program",
			yaml: oneMount("{source: \"host:/x\", destination: /x, type: fuse}"),
			want: []string{`type "fuse" needs the FUSE program: fuse.<program>, e.g. fuse.sshfs`},
		},
		{
			name: "duration without unit",
			yaml: "mountTimeout: 30\n" + oneMount("{source: /srv/a, destination: /a}"),
			want: []string{`line 1: duration "30": write it with a unit, e.g. "30s" or "1500ms"`},
		},
		{
			name: "relative stateDir",
			yaml: "stateDir: state\n" + oneMount("{source: /srv/a, destination: /a}"),
			want: []string{`stateDir "state" must be an absolute, clean path`},
		},
		{
			name: "several errors across classes all reported",
			yaml: "runtimeClasses:\n" +
				"  b-class:\n    mounts:\n" +
				"      - {source: relative, destination: /ok}\n" +
				"      - {source: /srv/x, destination: /proc/x}\n" +
				"  a-class:\n    mounts: []\n" +
				"  c-class:\n    mounts:\n" +
				"      - {source: /srv/y, destination: /y, propagation: sideways}\n",
			want: []string{
				`runtime class "a-class" has no mounts`,
				`runtime class "b-class", mount 1 (destination "/ok"): source "relative" is not an absolute path`,
				`runtime class "b-class", mount 2 (destination "/proc/x"): destination "/proc/x" is inside /proc or /sys`,
				`runtime class "c-class", mount 1 (destination "/y"): unknown propagation "sideways"`,
			},
		},
		{
			// Every problem of one mount is reported, each naming the class and the mount,
			// even when the propagation or the type is wrong too.
			name: "several errors in one mount all reported",
			yaml: oneMount("{source: srv, destination: data/, propagation: shared, type: ext4, options: [ro, bind, rshared, bogus]}"),
			want: []string{
				`runtime class "fast", mount 1 (destination "data/"): type "ext4" is not supported`,
				`runtime class "fast", mount 1 (destination "data/"): source "srv" is not an absolute path`,
				`runtime class "fast", mount 1 (destination "data/"): destination "data/" is relative`,
				`runtime class "fast", mount 1 (destination "data/"): unknown propagation "shared"`,
				`runtime class "fast", mount 1 (destination "data/"): option "ro": use readOnly`,
				`runtime class "fast", mount 1 (destination "data/"): option "bind" is implied`,
				`runtime class "fast", mount 1 (destination "data/"): option "rshared" sets propagation`,
				`runtime class "fast", mount 1 (destination "data/"): option "bogus" is not a bind mount option`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := configs.Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse accepted an invalid config:\n%s\ngot config %+v", tt.yaml, c)
			}
			if c != nil {
				t.Errorf("Parse returned a config together with error %q", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Parse error does not name the problem\ngot:  %s\nwant it to contain: %s", err, want)
				}
			}
		})
	}
}

func TestDefault(t *testing.T) {
	c := configs.Default()
	if got, want := c.ClassNames(), []string{"mountkeeper-demo"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("default ClassNames() = %q, want %q", got, want)
	}
	_, rc, ok := c.Class("mountkeeper-demo")
	if !ok {
		t.Fatal(`default config has no class "mountkeeper-demo"`)
	}
	want := specmod.Edits{Mounts: []specmod.Mount{
		{Source: "/run/mountkeeper-demo/private", Destination: "/demo/private", Propagation: specmod.Private},
		{Source: "/run/mountkeeper-demo/slave", Destination: "/demo/slave", Propagation: specmod.Slave, ReadOnly: true},
		{Source: "/run/mountkeeper-demo/shared", Destination: "/demo/shared", Propagation: specmod.Shared},
	}}
	if got := edits(rc); !reflect.DeepEqual(got, want) {
		t.Errorf("default class edits\ngot:  %+v\nwant: %+v", got, want)
	}
	if _, _, ok := c.Class(""); ok {
		t.Errorf("default config has a class for the default handler; it must only touch mountkeeper-demo pods")
	}
}

// edits is the class's bind mounts as a spec edit.
func edits(rc configs.RuntimeClass) specmod.Edits {
	var e specmod.Edits
	for _, m := range rc.Mounts {
		e.Mounts = append(e.Mounts, m.Bind)
	}
	return e
}

func TestDefaultYAMLFile(t *testing.T) {
	y, err := os.ReadFile("default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := configs.Parse(y)
	if err != nil {
		t.Fatalf("Parse(default.yaml): %v", err)
	}
	if !reflect.DeepEqual(c, configs.Default()) {
		t.Errorf("Parse(default.yaml) = %+v, want Default() = %+v", c, configs.Default())
	}
}

func TestPropagationNames(t *testing.T) {
	tests := []struct {
		name        string
		propagation string // as written in the config; "" leaves the key out
		want        specmod.Propagation
	}{
		{name: "missing defaults to rprivate", propagation: "", want: specmod.Private},
		{name: "Kubernetes None", propagation: "None", want: specmod.Private},
		{name: "Kubernetes HostToContainer", propagation: "HostToContainer", want: specmod.Slave},
		{name: "Kubernetes Bidirectional", propagation: "Bidirectional", want: specmod.Shared},
		{name: "lower-case Kubernetes name", propagation: "hosttocontainer", want: specmod.Slave},
		{name: "OCI rprivate", propagation: "rprivate", want: specmod.Private},
		{name: "OCI rslave", propagation: "rslave", want: specmod.Slave},
		{name: "OCI rshared", propagation: "rshared", want: specmod.Shared},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := "{source: /srv/a, destination: /a}"
			if tt.propagation != "" {
				m = "{source: /srv/a, destination: /a, propagation: " + tt.propagation + "}"
			}
			c, err := configs.Parse([]byte(oneMount(m)))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			_, rc, _ := c.Class("fast")
			e := edits(rc)
			if len(e.Mounts) != 1 {
				t.Fatalf("Edits() has %d mounts, want 1: %+v", len(e.Mounts), e)
			}
			if got := e.Mounts[0].Propagation; got != tt.want {
				t.Errorf("propagation %q became %q, want %q", tt.propagation, got, tt.want)
			}
		})
	}
}

func TestEditsCarryMountFields(t *testing.T) {
	c, err := configs.Parse([]byte(oneMount("{source: /srv/a, destination: /a, readOnly: true, type: bind, options: [nosuid, nodev]}")))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	_, rc, _ := c.Class("fast")
	want := specmod.Edits{Mounts: []specmod.Mount{{
		Source: "/srv/a", Destination: "/a", Propagation: specmod.Private, ReadOnly: true, Options: []string{"nosuid", "nodev"},
	}}}
	if got := edits(rc); !reflect.DeepEqual(got, want) {
		t.Errorf("Edits()\ngot:  %+v\nwant: %+v", got, want)
	}
}

func TestClassName(t *testing.T) {
	tests := []struct {
		name, handler, want string
	}{
		{name: "empty handler is the default class", handler: "", want: "default"},
		{name: "named handler", handler: "kata", want: "kata"},
		{name: "runc is not the default class", handler: "runc", want: "runc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := configs.ClassName(tt.handler); got != tt.want {
				t.Errorf("ClassName(%q) = %q, want %q", tt.handler, got, tt.want)
			}
		})
	}
}

func TestClass(t *testing.T) {
	c, err := configs.Parse([]byte("runtimeClasses:\n" +
		"  default:\n    mounts:\n      - {source: /srv/default, destination: /default}\n" +
		"  kata:\n    mounts:\n      - {source: /srv/kata, destination: /kata}\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tests := []struct {
		name       string
		handler    string
		wantName   string
		wantOK     bool
		wantSource string
	}{
		{name: "empty handler finds the default class", handler: "", wantName: "default", wantOK: true, wantSource: "/srv/default"},
		{name: "named handler", handler: "kata", wantName: "kata", wantOK: true, wantSource: "/srv/kata"},
		{name: "unconfigured handler", handler: "runc", wantName: "runc", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, rc, ok := c.Class(tt.handler)
			if name != tt.wantName || ok != tt.wantOK {
				t.Fatalf("Class(%q) = %q, %v; want %q, %v", tt.handler, name, ok, tt.wantName, tt.wantOK)
			}
			if !ok {
				if len(rc.Mounts) != 0 {
					t.Errorf("Class(%q) found nothing but returned mounts %+v", tt.handler, rc.Mounts)
				}
				return
			}
			if len(rc.Mounts) != 1 || rc.Mounts[0].Source != tt.wantSource {
				t.Errorf("Class(%q) mounts = %+v, want one with source %s", tt.handler, rc.Mounts, tt.wantSource)
			}
		})
	}
	if got, want := c.ClassNames(), []string{"default", "kata"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ClassNames() = %q, want %q", got, want)
	}
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	valid := writeFile(t, "valid.yaml", oneMount("{source: /srv/a, destination: /a}"))
	invalid := writeFile(t, "invalid.yaml", oneMount("{source: /srv/a, destination: /a, propagaton: rslave}"))
	missing := filepath.Join(t.TempDir(), "missing.yaml")

	tests := []struct {
		name         string
		path         string
		wantErr      []string // nil: must load
		wantNotExist bool
	}{
		{name: "valid file", path: valid},
		{name: "invalid file names path and problem", path: invalid, wantErr: []string{"config " + invalid + ": ", "field propagaton not found"}},
		{name: "missing file names path", path: missing, wantErr: []string{"read config: ", missing}, wantNotExist: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := configs.Load(tt.path)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Load(%s): %v", tt.path, err)
				}
				if _, _, ok := c.Class("fast"); !ok {
					t.Errorf("Load(%s) = %+v, want class fast", tt.path, c)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load(%s) = %+v, want an error", tt.path, c)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Load(%s) error\ngot:  %s\nwant it to contain: %s", tt.path, err, want)
				}
			}
			if got := errors.Is(err, fs.ErrNotExist); got != tt.wantNotExist {
				t.Errorf("errors.Is(%q, fs.ErrNotExist) = %v, want %v", err, got, tt.wantNotExist)
			}
		})
	}
}

func TestLoadOrDefault(t *testing.T) {
	valid := writeFile(t, "config.yaml", oneMount("{source: /srv/a, destination: /a}"))
	missing := filepath.Join(t.TempDir(), "config.yaml")

	t.Run("explicit path loads", func(t *testing.T) {
		c, from, err := configs.LoadOrDefault(valid)
		if err != nil {
			t.Fatalf("LoadOrDefault(%s): %v", valid, err)
		}
		if from != valid {
			t.Errorf("LoadOrDefault(%s) says the config came from %q, want %q", valid, from, valid)
		}
		if _, _, ok := c.Class("fast"); !ok {
			t.Errorf("LoadOrDefault(%s) = %+v, want class fast", valid, c)
		}
	})
	t.Run("explicit missing path errors", func(t *testing.T) {
		c, from, err := configs.LoadOrDefault(missing)
		if err == nil {
			t.Fatalf("LoadOrDefault(%s) = %+v from %q, want an error: only DefaultPath falls back", missing, c, from)
		}
		if !strings.Contains(err.Error(), missing) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("LoadOrDefault(%s) error = %q, want a not-exist error naming the path", missing, err)
		}
	})
	t.Run("missing DefaultPath falls back to the embedded default", func(t *testing.T) {
		if _, err := os.Stat(configs.DefaultPath); !errors.Is(err, fs.ErrNotExist) {
			testenv.Skip(t, "%s is present on this machine (stat: %v): the fallback cannot be tested here", configs.DefaultPath, err)
		}
		c, from, err := configs.LoadOrDefault(configs.DefaultPath)
		if err != nil {
			t.Fatalf("LoadOrDefault(DefaultPath): %v", err)
		}
		if want := "embedded default (" + configs.DefaultPath + " does not exist)"; from != want {
			t.Errorf("LoadOrDefault(DefaultPath) source = %q, want %q", from, want)
		}
		if !reflect.DeepEqual(c, configs.Default()) {
			t.Errorf("LoadOrDefault(DefaultPath) = %+v, want the embedded default", c)
		}
	})
}

func TestNodeWideDefaults(t *testing.T) {
	tests := []struct {
		name       string
		yaml       string
		root       string
		repair     bool
		numClasses int
	}{
		{"defaults", oneMount("{source: /srv/a, destination: /a}"), configs.DefaultKubeletRoot, true, 1},
		{"repair only, no classes", "kubeletRoot: /data/kubelet\n", "/data/kubelet", true, 0},
		{"repair off", "subPathRepair: false\n" + oneMount("{source: /srv/a, destination: /a}"), configs.DefaultKubeletRoot, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := configs.Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if c.KubeletRoot != tc.root || c.SubPathRepair != tc.repair || len(c.RuntimeClasses) != tc.numClasses {
				t.Errorf("kubeletRoot %q, repair %v, %d classes; want %q, %v, %d",
					c.KubeletRoot, c.SubPathRepair, len(c.RuntimeClasses), tc.root, tc.repair, tc.numClasses)
			}
		})
	}
}

func TestNetworkMountErrorsHideSecrets(t *testing.T) {
	_, err := configs.Parse([]byte(oneMount(`{source: "//u:pw123@srv/share", destination: rel, type: cifs, options: [password=hunter2, "x,y"]}`)))
	if err == nil {
		t.Fatal("invalid network mount accepted")
	}
	for _, secret := range []string{"hunter2", "pw123"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error shows the secret %q: %v", secret, err)
		}
	}
}

// TestCreateBudgetBelowPluginTimeout: a createBudget the runtime's plugin_request_timeout
// (2s unless pluginRequestTimeout says otherwise) would cut short is refused, since the runtime
// then creates the container without its mounts; the budget keeps a margin below it.
func TestCreateBudgetBelowPluginTimeout(t *testing.T) {
	mount := oneMount("{source: /srv/a, destination: /a}")
	for _, tt := range []struct {
		yaml string
		want string // error substring; "" accepted
	}{
		{yaml: "createBudget: 10m\n", want: `createBudget 10m0s must stay at least 500ms below the runtime's plugin_request_timeout (2s`},
		{yaml: "createBudget: 2s\n", want: `createBudget 2s must stay at least 500ms below the runtime's plugin_request_timeout (2s`},
		{yaml: "createBudget: 1600ms\n", want: `createBudget 1.6s must stay at least 500ms below`},
		{yaml: "createBudget: 1500ms\n"},
		{yaml: ""},
		{yaml: "createBudget: 4s\npluginRequestTimeout: 5s\n"},
		{yaml: "createBudget: 4600ms\npluginRequestTimeout: 5s\n", want: `createBudget 4.6s must stay at least 500ms below the runtime's plugin_request_timeout (5s, pluginRequestTimeout)`},
		{yaml: "pluginRequestTimeout: 1s\n", want: `createBudget 1.5s must stay at least 500ms below the runtime's plugin_request_timeout (1s, pluginRequestTimeout)`},
		{yaml: "pluginRequestTimeout: 400ms\ncreateBudget: 100ms\n", want: `pluginRequestTimeout 400ms leaves no createBudget`},
	} {
		c, err := configs.Parse([]byte(tt.yaml + mount))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Parse(%q): %v", tt.yaml, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("Parse(%q) error\ngot:  %v\nwant it to contain: %s", tt.yaml, err, tt.want)
		case tt.want == "" && c.CreateBudget <= 0:
			t.Errorf("Parse(%q): createBudget %s", tt.yaml, c.CreateBudget)
		}
	}
}

// TestSourcesDoNotOverlap: a class source that equals or lies under another class's source (of
// any class), or lies under stateDir or kubeletRoot, or holds one of them, is refused. A
// container that can write the outer source could otherwise replace the inner source with a
// symlink and hand the next container the host's /etc.
func TestSourcesDoNotOverlap(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		want       []string // error substrings; nil accepted
	}{
		{name: "nested in one class", yaml: "runtimeClasses:\n  a:\n    mounts:\n      - {source: /srv/shared, destination: /shared}\n      - {source: /srv/shared/cfg, destination: /cfg, readOnly: true}\n",
			want: []string{`runtime class "a", mount 2 (destination "/cfg"): source /srv/shared/cfg lies under /srv/shared, the source of runtime class "a", mount 1: a container that can write there could replace it with a symlink`}},
		{name: "nested across classes, either order", yaml: "runtimeClasses:\n  a:\n    mounts: [{source: /srv/x/y, destination: /y}]\n  b:\n    mounts: [{source: /srv/x, destination: /x}]\n",
			want: []string{`runtime class "a", mount 1 (destination "/y"): source /srv/x/y lies under /srv/x, the source of runtime class "b", mount 1`}},
		{name: "equal across classes", yaml: "runtimeClasses:\n  a:\n    mounts: [{source: /srv/x, destination: /x}]\n  b:\n    mounts: [{source: /srv/x, destination: /x}]\n",
			want: []string{`runtime class "b", mount 1 (destination "/x"): source /srv/x is also the source of runtime class "a", mount 1`}},
		{name: "under stateDir", yaml: "stateDir: /var/lib/mk\n" + oneMount("{source: /var/lib/mk/mounts/x, destination: /x}"),
			want: []string{`source /var/lib/mk/mounts/x lies under stateDir /var/lib/mk`}},
		{name: "under the default stateDir", yaml: oneMount("{source: /var/lib/mountkeeper, destination: /x}"),
			want: []string{`source /var/lib/mountkeeper lies under stateDir /var/lib/mountkeeper`}},
		{name: "holds stateDir", yaml: oneMount("{source: /var/lib, destination: /x}"),
			want: []string{`source /var/lib holds stateDir /var/lib/mountkeeper`, `source /var/lib holds kubeletRoot /var/lib/kubelet`}},
		{name: "under kubeletRoot", yaml: oneMount("{source: /var/lib/kubelet/pods/uid/volumes/x, destination: /x}"),
			want: []string{`source /var/lib/kubelet/pods/uid/volumes/x lies under kubeletRoot /var/lib/kubelet: kubelet keeps every pod's volumes there`}},
		{name: "prefix that is not a parent", yaml: "runtimeClasses:\n  a:\n    mounts: [{source: /srv/ab, destination: /ab}, {source: /srv/a, destination: /a}]\n  n:\n    mounts: [{type: nfs, source: \"filer:/srv/a\", destination: /n}]\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := configs.Parse([]byte(tt.yaml))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse accepted overlapping sources:\n%s", tt.yaml)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse error\ngot:  %v\nwant it to contain: %s", err, w)
				}
			}
		})
	}
}

// TestSubPathUpdates: the key's values, its default resolved at load, a class of live updates
// alone, and the refusal of an unknown value and of a kernel that cannot mount beneath.
func TestSubPathUpdates(t *testing.T) {
	class := func(v string, mounts bool) string {
		y := "runtimeClasses:\n  c:\n"
		if v != "" {
			y += "    subPathUpdates: " + v + "\n"
		}
		if mounts {
			y += "    mounts:\n      - {source: /srv, destination: /d}\n"
		}
		return y
	}
	for _, tc := range []struct {
		name, yaml string
		noBeneath  bool
		want, err  string
	}{
		{name: "default", yaml: class("", true), want: configs.SubPathUpdatesKubelet},
		{name: "kubelet", yaml: class("kubelet", true), want: configs.SubPathUpdatesKubelet},
		{name: "live", yaml: class("live", true), want: configs.SubPathUpdatesLive},
		{name: "podOptIn", yaml: class("podOptIn", true), want: configs.SubPathUpdatesPodOptIn},
		{name: "live without mounts", yaml: class("live", false), want: configs.SubPathUpdatesLive},
		{name: "kubelet without mounts", yaml: class("kubelet", false), err: `runtime class "c" has no mounts`},
		{name: "unknown", yaml: class("always", true), err: `runtime class "c": subPathUpdates "always": use kubelet (the default`},
		{name: "case matters", yaml: class("Live", true), err: `subPathUpdates "Live"`},
		{name: "old kernel", yaml: class("live", true), noBeneath: true, err: `runtime class "c": subPathUpdates: live needs to mount beneath a mount (MOVE_MOUNT_BENEATH, Linux 6.5 or newer), and this kernel cannot: no beneath here; use kubelet`},
		{name: "old kernel, kubelet", yaml: class("kubelet", true), noBeneath: true, want: configs.SubPathUpdatesKubelet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noBeneath {
				old := configs.CanMountBeneath
				configs.CanMountBeneath = func() error { return errors.New("no beneath here") }
				defer func() { configs.CanMountBeneath = old }()
			}
			c, err := configs.Parse([]byte(tc.yaml))
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Parse = %v, want an error with %q", err, tc.err)
				}
			case err != nil:
				t.Errorf("Parse: %v", err)
			case c.RuntimeClasses["c"].SubPathUpdates != tc.want:
				t.Errorf("subPathUpdates = %q, want %q", c.RuntimeClasses["c"].SubPathUpdates, tc.want)
			}
		})
	}
}

// TestCheckLiveChange: a reload may change anything but stateDir; a changed stateDir is
// refused naming the key, both values and the restart it needs.
func TestCheckLiveChange(t *testing.T) {
	parse := func(text string) *configs.Config {
		t.Helper()
		c, err := configs.Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	was := parse("stateDir: /var/lib/a\nruntimeClasses: {x: {mounts: [{source: /s, destination: /d}]}}\n")
	if err := was.CheckLiveChange(parse("stateDir: /var/lib/a\nmountTimeout: 5s\nruntimeClasses: {y: {mounts: [{source: /s, destination: /d}]}}\n")); err != nil {
		t.Errorf("a reload that keeps stateDir: %v", err)
	}
	err := was.CheckLiveChange(parse("runtimeClasses: {x: {mounts: [{source: /s, destination: /d}]}}\n"))
	if err == nil || !strings.Contains(err.Error(), `stateDir changed from "/var/lib/a" to "/var/lib/mountkeeper"`) || !strings.Contains(err.Error(), "restart the agent") {
		t.Errorf("a reload that moves stateDir (to the default): %v, want it refused, naming the key and the restart", err)
	}
}

// TestLiveClassOnThisKernel: with the kernel's own answer (the kernel matrix runs this on
// Debian's 5.10, 6.1 and 6.12), a class of live subPath updates loads where the kernel can
// mount beneath a mount (Linux 6.5 or newer) and is refused at load elsewhere, naming the
// kernel's reason and the value to use; a podOptIn class likewise, a kubelet class always loads.
func TestLiveClassOnThisKernel(t *testing.T) {
	kernel := mounttable.CanMountBeneath()
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(uts.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	// move_mount checks privilege before its flags: only root gets the kernel's answer.
	if beneath := major > 6 || major == 6 && minor >= 5; os.Geteuid() == 0 && beneath != (kernel == nil) {
		t.Fatalf("Linux %s: the kernel can mount beneath: %v; want that from 6.5 on", release, kernel)
	}
	for _, v := range []string{configs.SubPathUpdatesLive, configs.SubPathUpdatesPodOptIn, configs.SubPathUpdatesKubelet} {
		_, err := configs.Parse([]byte("runtimeClasses:\n  c:\n    subPathUpdates: " + v + "\n    mounts:\n      - {source: /srv, destination: /d}\n"))
		switch {
		case kernel == nil || v == configs.SubPathUpdatesKubelet:
			if err != nil {
				t.Errorf("Linux %s: subPathUpdates: %s refused: %v", release, v, err)
			}
		case err == nil:
			t.Errorf("Linux %s cannot mount beneath (%v), yet subPathUpdates: %s loads", release, kernel, v)
		case !strings.Contains(err.Error(), "Linux 6.5 or newer), and this kernel cannot: "+kernel.Error()+"; use kubelet"):
			t.Errorf("Linux %s: subPathUpdates: %s refused with %q; want the kernel's reason and the value to use", release, v, err)
		default:
			t.Logf("Linux %s: subPathUpdates: %s refused at load: %v", release, v, err)
		}
	}
}
