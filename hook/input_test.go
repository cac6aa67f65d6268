package hook

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
)

func TestParseStage(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "prestart", want: "prestart"},
		{in: "createRuntime", want: "createRuntime"},
		{in: "precreate", want: "precreate"},
		{in: "", err: "no hook stage given: use prestart, createRuntime or precreate"},
		{in: "createruntime", err: `unknown hook stage "createruntime": did you mean "createRuntime"?`},
		{in: "Prestart", err: `did you mean "prestart"?`},
		{in: "createContainer", err: `hook stage "createContainer" is not supported: it runs inside the container`},
		{in: "poststop", err: `hook stage "poststop" is not supported`},
		{in: "mount", err: `unknown hook stage "mount": use prestart, createRuntime or precreate`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseStage(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseStage(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("ParseStage(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseState(t *testing.T) {
	tests := []struct {
		name, in, err string
	}{
		{name: "runc's state", in: `{"ociVersion":"1.3.0","id":"c1","status":"creating","pid":42,"bundle":"/run/b","annotations":{"a":"b"}}`},
		{name: "created is fine", in: `{"id":"c1","status":"created","pid":42,"bundle":"/run/b"}`},
		{name: "no status is fine", in: `{"pid":42,"bundle":"/run/b"}`},
		{name: "empty", in: "", err: "the OCI state on stdin is empty: the runtime passes the container's state as JSON"},
		{name: "blank", in: " \n", err: "the OCI state on stdin is empty"},
		{name: "malformed JSON", in: `{"pid": 42, "bundle": `, err: "parse the OCI state on stdin: unexpected end of JSON input: the runtime passes"},
		{name: "a config.json instead", in: `{"ociVersion":"1.3.0","process":{"args":["sh"]},"root":{"path":"rootfs"}}`, err: "the OCI state on stdin has no bundle"},
		{name: "array", in: `[1]`, err: "parse the OCI state on stdin: json: cannot unmarshal array"},
		{name: "null", in: `null`, err: "the OCI state on stdin is null"},
		{name: "trailing garbage", in: `{"pid":42,"bundle":"/b"} x`, err: "parse the OCI state on stdin: invalid character 'x' after top-level value"},
		{name: "missing bundle", in: `{"id":"c1","pid":42}`, err: "the OCI state on stdin has no bundle: mountkeeper reads the container's config.json from it"},
		{name: "relative bundle", in: `{"pid":42,"bundle":"run/b"}`, err: `the OCI state's bundle "run/b" is not an absolute path`},
		{name: "pid of the wrong type", in: `{"pid":"42","bundle":"/b"}`, err: "cannot unmarshal string into Go struct field State.pid of type int"},
		{name: "no pid", in: `{"bundle":"/b"}`, err: "the OCI state on stdin has no pid (0)"},
		{name: "negative pid", in: `{"bundle":"/b","pid":-1}`, err: "has no pid (-1)"},
		{name: "running container", in: `{"status":"running","pid":42,"bundle":"/b"}`, err: "the container is running: mountkeeper must run before the container starts, as a prestart or createRuntime hook"},
		{name: "stopped container", in: `{"status":"stopped","pid":42,"bundle":"/b"}`, err: "the container is stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := ParseState([]byte(tt.in))
			if tt.err == "" {
				if err != nil {
					t.Fatalf("ParseState: %v", err)
				}
				if st.Pid != 42 || st.Bundle != "/run/b" && st.Bundle != "/b" {
					t.Errorf("ParseState = %+v", st)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("ParseState(%q) error\ngot:  %v\nwant: %s", tt.in, err, tt.err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

func TestLoadSpec(t *testing.T) {
	dir := t.TempDir()
	bundle := func(name, config string) string {
		b := filepath.Join(dir, name)
		if err := os.Mkdir(b, 0o755); err != nil {
			t.Fatal(err)
		}
		if config != "" {
			if err := os.WriteFile(filepath.Join(b, "config.json"), []byte(config), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	good := bundle("good", `{"ociVersion":"1.3.0","root":{"path":"rootfs"},"futureField":[1]}`)
	notJSON := bundle("notjson", "root:\n  path: rootfs\n")
	noRoot := bundle("noroot", `{"ociVersion":"1.3.0"}`)
	empty := bundle("empty", " ")
	null := bundle("null", "null")
	noConfig := bundle("noconfig", "")
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)

	tests := []struct {
		name, bundle, err string
	}{
		{name: "good", bundle: good},
		{name: "missing bundle", bundle: filepath.Join(dir, "gone"), err: "the bundle " + filepath.Join(dir, "gone") + " from the OCI state does not exist"},
		{name: "bundle is a file", bundle: file, err: "the bundle " + file + " from the OCI state is not a directory"},
		{name: "no config.json", bundle: noConfig, err: "read the container's config: open " + noConfig + "/config.json: no such file or directory"},
		{name: "config.json is not JSON", bundle: notJSON, err: notJSON + "/config.json: not an OCI config: invalid character 'r' looking for beginning of value"},
		{name: "config.json is blank", bundle: empty, err: empty + "/config.json: not an OCI config: unexpected end of JSON input"},
		{name: "config.json is null", bundle: null, err: null + "/config.json: not an OCI config: the document is null"},
		{name: "config.json has no root", bundle: noRoot, err: noRoot + "/config.json: the OCI config has no root.path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := loadSpec(tt.bundle)
			if tt.err == "" {
				if err != nil || spec.Root.Path != "rootfs" {
					t.Fatalf("loadSpec = %+v, %v", spec, err)
				}
				return
			}
			if err == nil || err.Error() != tt.err {
				t.Fatalf("loadSpec error\ngot:  %v\nwant: %s", err, tt.err)
			}
		})
	}
}

func TestRootfsPath(t *testing.T) {
	for _, tt := range []struct{ bundle, root, want string }{
		{"/run/b", "rootfs", "/run/b/rootfs"},
		{"/run/b", "/var/lib/x/rootfs", "/var/lib/x/rootfs"},
		{"/run/b", "./r/../rootfs/", "/run/b/rootfs"},
	} {
		spec, err := parseSpec([]byte(`{"root":{"path":` + quote(tt.root) + `}}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := rootfsPath(tt.bundle, spec); got != tt.want {
			t.Errorf("rootfsPath(%q, %q) = %q, want %q", tt.bundle, tt.root, got, tt.want)
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// FuzzParseState: no input panics, errors are one line, and what is accepted has what the
// hook relies on.
func FuzzParseState(f *testing.F) {
	for _, s := range []string{
		`{"ociVersion":"1.3.0","id":"c1","status":"creating","pid":42,"bundle":"/run/b","annotations":{"a":"b"}}`,
		`{"pid":1,"bundle":"/"}`, `null`, `[]`, `{"pid":-1}`, `{"bundle":"rel","pid":3}`, `{"status":"running","pid":1,"bundle":"/b"}`,
		"", "{", `{"pid":1e99,"bundle":"/b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseState(data)
		if err != nil {
			if st != nil {
				t.Errorf("ParseState returned a state with an error")
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			return
		}
		if st.Pid <= 0 || !filepath.IsAbs(st.Bundle) {
			t.Errorf("ParseState accepted pid %d bundle %q", st.Pid, st.Bundle)
		}
	})
}

var fuzzConfig = func() *configs.Config {
	c, err := configs.Parse([]byte("runtimeClasses:\n  fuzz:\n    mounts: [{source: /srv/fuzz, destination: /mk-fuzz}]\n"))
	if err != nil {
		panic(err)
	}
	return c
}()

// FuzzParseSpec: no input panics, and an accepted spec has a root path; precreate's
// rendering of an accepted spec keeps every top-level key.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		`{"ociVersion":"1.3.0","root":{"path":"rootfs"},"mounts":[{"destination":"/proc","type":"proc","source":"proc"}],"linux":{"namespaces":[{"type":"mount"}]}}`,
		`{"root":{"path":"/abs"},"future":{"x":[1,null]}}`, `{"root":null}`, `null`, `{"mounts":{}}`, `{"linux":null,"root":{"path":"r"}}`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := parseSpec(data)
		if err != nil {
			return
		}
		if spec.Root == nil || spec.Root.Path == "" {
			t.Fatalf("parseSpec accepted a spec without root.path: %q", data)
		}
		_ = rootfsPath("/bundle", spec)
		if spec.Linux != nil {
			_ = hasMountNamespace(spec.Linux.Namespaces)
		}
		_, _ = SelectClass("", true, spec.Annotations)

		var out bytes.Buffer
		opts := Options{Config: fuzzConfig, RuntimeClass: "fuzz"}
		if err := Run(Precreate, opts, bytes.NewReader(data), &out); err != nil {
			return
		}
		var in, got map[string]json.RawMessage
		if err := json.Unmarshal(data, &in); err != nil {
			t.Fatalf("accepted input is not an object: %v", err)
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("precreate output is not a JSON object: %v\n%s", err, out.Bytes())
		}
		for k := range in {
			if _, ok := got[k]; !ok {
				t.Errorf("precreate dropped the top-level key %q", k)
			}
		}
	})
}

// TestParseSpecKeepsWhatTheMountStagesRead: the partial spec parseSpec returns must give the
// engine the same answers as the whole document does.
func TestParseSpecKeepsWhatTheMountStagesRead(t *testing.T) {
	full := oci.Spec{
		Version:     "1.3.0",
		Annotations: map[string]string{"io.kubernetes.cri.runtime-handler": "fast", "a": "b"},
		Root:        &oci.Root{Path: "rootfs", Readonly: true},
		Hostname:    "h",
		Mounts: []oci.Mount{
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "ro"}},
			{Destination: "/data", Type: "bind", Source: "/srv/data", Options: []string{"rbind", "rslave"}},
		},
		Process: &oci.Process{Args: []string{"sh"}, Cwd: "/", Capabilities: &oci.LinuxCapabilities{
			Bounding: []string{"CAP_SYS_ADMIN", "CAP_CHOWN"}, Effective: []string{"CAP_CHOWN"},
		}},
		Linux: &oci.Linux{
			Namespaces:        []oci.LinuxNamespace{{Type: oci.MountNamespace}, {Type: oci.PIDNamespace, Path: "/proc/1/ns/pid"}},
			RootfsPropagation: "rslave",
			MaskedPaths:       []string{"/proc/kcore"},
		},
	}
	data, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Annotations, full.Annotations) || !reflect.DeepEqual(got.Root, full.Root) || !reflect.DeepEqual(got.Mounts, full.Mounts) {
		t.Errorf("parseSpec lost annotations, root or mounts: %+v", got)
	}
	if !reflect.DeepEqual(got.Process.Capabilities.Bounding, full.Process.Capabilities.Bounding) {
		t.Errorf("bounding capabilities %v, want %v", got.Process.Capabilities.Bounding, full.Process.Capabilities.Bounding)
	}
	if !reflect.DeepEqual(got.Linux.Namespaces, full.Linux.Namespaces) || got.Linux.RootfsPropagation != "rslave" {
		t.Errorf("linux %+v, want the namespaces and rootfsPropagation of %+v", got.Linux, full.Linux)
	}
	if !engine.PrivilegedSpec(got) || engine.UserNamespaceSpec(got) {
		t.Errorf("privileged %v, user namespace %v: want true, false", engine.PrivilegedSpec(got), engine.UserNamespaceSpec(got))
	}
}
