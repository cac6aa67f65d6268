package runtimewrap

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/guard"
)

func TestParseCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want Call
		err  string
	}{
		{"containerd's shim create", []string{"--root", "/run/containerd/runc/k8s.io", "--log", "/run/x/log.json", "--log-format", "json", "--systemd-cgroup", "create", "--bundle", "/run/b", "--pid-file", "/run/b/init.pid", "abc"},
			Call{Command: "create", ID: "abc", Bundle: "/run/b", Log: "/run/x/log.json", LogFormat: "json"}, ""},
		{"options with =", []string{"--root=/r", "--log=/l", "create", "--bundle=/b", "--console-socket=/s", "id1"},
			Call{Command: "create", ID: "id1", Bundle: "/b", Log: "/l"}, ""},
		{"conmon's create", []string{"--systemd-cgroup", "--root=/run/runc", "create", "--bundle", "/b", "--pid-file", "/p", "--no-pivot", "--no-new-keyring", "id2"},
			Call{Command: "create", ID: "id2", Bundle: "/b"}, ""},
		{"run, short bundle, no bundle", []string{"run", "-d", "-b", "/b", "id3"}, Call{Command: "run", ID: "id3", Bundle: "/b"}, ""},
		{"create in the working directory", []string{"create", "id4"}, Call{Command: "create", ID: "id4"}, ""},
		{"after --", []string{"create", "--", "id5"}, Call{Command: "create", ID: "id5"}, ""},
		{"containerd's shim restore (go-runc's RestoreOpts)", []string{"--root", "/r", "--log", "/l", "restore", "--image-path", "/img", "--work-path", "/work", "--manage-cgroups-mode", "soft", "--empty-ns", "network", "--detach", "--pid-file", "/b/init.pid", "--no-pivot", "--bundle", "/b", "abc"},
			Call{Command: "restore", ID: "abc", Bundle: "/b", Log: "/l"}, ""},
		{"create with a pidfd socket", []string{"create", "--pidfd-socket", "/s", "--bundle", "/b", "id6"}, Call{Command: "create", ID: "id6", Bundle: "/b"}, ""},
		{"start", []string{"--root", "/r", "start", "abc"}, Call{Command: "start"}, ""},
		{"delete --force", []string{"delete", "--force", "abc"}, Call{Command: "delete"}, ""},
		{"features", []string{"features"}, Call{Command: "features"}, ""},
		{"no ID", []string{"--log", "/l", "create", "--bundle", "/b"}, Call{Command: "create", Bundle: "/b", Log: "/l"}, "no container ID"},
		{"a value missing", []string{"create", "--bundle"}, Call{Command: "create"}, "without a value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCall(tc.args)
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func spec(t *testing.T, annotations map[string]string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"ociVersion": "1.2.1", "process": map[string]any{"args": []string{"sh"}}, "annotations": annotations})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheck(t *testing.T) {
	stateDir := t.TempDir()
	e := Entry{Class: "mk-web", Runtime: "/usr/bin/runc", StateDir: stateDir}
	call := Call{Command: "create", ID: "c1", Bundle: "/b"}
	names := map[string]string{"io.kubernetes.cri.sandbox-namespace": "ns", "io.kubernetes.cri.sandbox-name": "pod", "io.kubernetes.cri.container-name": "app"}
	if err := Check(e, call, spec(t, names)); err == nil || !strings.Contains(err.Error(), `mountkeeper: runtime class "mk-web", container ns/pod/app: mountkeeper has not handled any container on this node yet`) {
		t.Errorf("no key on the node: %v", err)
	}
	key, err := guard.LoadOrCreateKey(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	with := func(extra map[string]string) map[string]string {
		a := map[string]string{}
		for k, v := range names {
			a[k] = v
		}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		err         string
	}{
		{"marked by the plugin", with(map[string]string{guard.Annotation: guard.Token(key, "c1")}), ""},
		{"not marked", names, `mountkeeper: runtime class "mk-web", container ns/pod/app: the mountkeeper NRI plugin did not handle this container`},
		{"another container's mark", with(map[string]string{guard.Annotation: guard.Token(key, "c2")}), "did not handle"},
		{"containerd's sandbox", map[string]string{"io.kubernetes.cri.container-type": "sandbox", "io.kubernetes.cri.sandbox-id": "c1"}, ""},
		{"CRI-O's sandbox", map[string]string{"io.kubernetes.cri-o.ContainerType": "sandbox", "io.kubernetes.cri-o.SandboxID": "c1"}, ""},
		{"a container posing as a sandbox", with(map[string]string{"io.kubernetes.cri.container-type": "sandbox", "io.kubernetes.cri.sandbox-id": "pod-1"}), "did not handle"},
		{"CRI-O container posing as a sandbox", with(map[string]string{"io.kubernetes.cri-o.ContainerType": "sandbox"}), "did not handle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(e, call, spec(t, tc.annotations))
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Check: %v, want %q", err, tc.err)
			}
		})
	}
	if err := Check(e, call, []byte("{")); err == nil || !strings.Contains(err.Error(), "read /b/config.json") {
		t.Errorf("a broken config.json: %v, want a refusal", err)
	}
}

// fakeSystem records what Main did instead of doing it.
type fakeSystem struct {
	files    map[string][]byte
	appended map[string]string
	execed   []string
}

func (f *fakeSystem) ReadFile(path string, limit int64) ([]byte, error) {
	b, ok := f.files[path]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	if int64(len(b)) > limit {
		return nil, errors.New("too large")
	}
	return b, nil
}

func (f *fakeSystem) AppendFile(path string, data []byte) error {
	f.appended[path] += string(data)
	return nil
}

func (f *fakeSystem) Exec(runtime string, argv []string) error {
	f.execed = append([]string{runtime}, argv...)
	return errors.New("exec is faked")
}

func (f *fakeSystem) Now() time.Time { return time.Date(2026, 11, 26, 1, 2, 3, 0, time.UTC) }

// TestMain: every call but an unmarked create reaches the real runtime with the exact arguments;
// an unmarked create does not, and its refusal lands where containerd's shim reads runtime
// errors (the --log, as JSON).
func TestMainWrapper(t *testing.T) {
	stateDir := t.TempDir()
	key, err := guard.LoadOrCreateKey(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	link := "/opt/mountkeeper/bin/class/mk-web"
	entry := []byte(`{"class":"mk-web","runtime":"/usr/local/sbin/runc","stateDir":"` + stateDir + `"}`)
	unmarked := spec(t, map[string]string{"io.kubernetes.cri.container-name": "app"})
	marked := spec(t, map[string]string{guard.Annotation: guard.Token(key, "c1")})
	create := []string{"--root", "/r", "--log", "/run/log.json", "--log-format", "json", "create", "--bundle", "/b", "c1"}
	restore := []string{"--root", "/r", "--log", "/run/log.json", "--log-format", "json", "restore", "--image-path", "/img", "--work-path", "/img", "--detach", "--pid-file", "/b/init.pid", "--bundle", "/b", "c1"}
	// Every other subcommand of runc acts on a container that exists or creates none: it goes
	// to the runtime unchecked, without config.json.
	type wrapperCase struct {
		name    string
		argv0   string
		args    []string
		files   map[string][]byte
		execs   bool
		stderr  string
		logLine string
	}
	var passes []wrapperCase
	for _, cmd := range []string{"checkpoint", "delete", "events", "exec", "init", "kill", "list", "pause", "ps", "resume", "spec", "start", "state", "update", "features"} {
		passes = append(passes, wrapperCase{cmd, link, []string{"--root", "/r", cmd, "c1"}, map[string][]byte{link + ".json": entry}, true, "", ""})
	}
	for _, tc := range append(passes, []wrapperCase{
		{"a marked create", link, create, map[string][]byte{link + ".json": entry, "/b/config.json": marked}, true, "", ""},
		{"start", link, []string{"--root", "/r", "start", "c1"}, map[string][]byte{link + ".json": entry}, true, "", ""},
		{"an unreadable delete goes to the runtime", link, []string{"--root"}, map[string][]byte{link + ".json": entry}, true, "", ""},
		{"an unmarked create", link, create, map[string][]byte{link + ".json": entry, "/b/config.json": unmarked}, false,
			`mountkeeper: runtime class "mk-web", container app: the mountkeeper NRI plugin did not handle`,
			`{"level":"error","msg":"mountkeeper: runtime class \"mk-web\", container app: the mountkeeper NRI plugin did not handle`},
		{"a create without config.json", link, create, map[string][]byte{link + ".json": entry}, false,
			`mountkeeper: runtime class "mk-web", container c1: read the container's spec: open /b/config.json`, `{"level":"error","msg":"mountkeeper: runtime class`},
		{"a create it cannot read", link, []string{"create", "--bundle"}, map[string][]byte{link + ".json": entry}, false, "cannot read this create command line", ""},
		// restore creates a container too (from a checkpoint): containerd's runc shim runs it
		// instead of create when a task starts from one.
		{"an unmarked restore", link, restore, map[string][]byte{link + ".json": entry, "/b/config.json": unmarked}, false,
			`mountkeeper: runtime class "mk-web", container app: the mountkeeper NRI plugin did not handle`,
			`{"level":"error","msg":"mountkeeper: runtime class \"mk-web\", container app: the mountkeeper NRI plugin did not handle`},
		{"a marked restore", link, restore, map[string][]byte{link + ".json": entry, "/b/config.json": marked}, true, "", ""},
		{"a restore it cannot read", link, []string{"restore", "--image-path"}, map[string][]byte{link + ".json": entry}, false, "cannot read this create command line", ""},
		{"no entry", link, []string{"start", "c1"}, nil, false, "run `mountkeeper runtime configure` again", ""},
		{"started by a relative path", "mk-web", []string{"start", "c1"}, nil, false, "absolute path", ""},
	}...) {
		t.Run(tc.name, func(t *testing.T) {
			sys := &fakeSystem{files: tc.files, appended: map[string]string{}}
			var stderr strings.Builder
			status := Main(append([]string{tc.argv0}, tc.args...), &stderr, sys)
			if status == 0 {
				t.Errorf("Main returned 0 without becoming the runtime")
			}
			wantExec := []string(nil)
			if tc.execs {
				wantExec = append([]string{"/usr/local/sbin/runc", "/usr/local/sbin/runc"}, tc.args...)
			}
			if !reflect.DeepEqual(sys.execed, wantExec) {
				t.Errorf("exec %q, want %q", sys.execed, wantExec)
			}
			if tc.stderr != "" && !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.stderr)
			}
			if got := sys.appended["/run/log.json"]; !strings.HasPrefix(got, tc.logLine) || (tc.logLine == "") != (got == "") {
				t.Errorf("--log got %q, want a line starting %q", got, tc.logLine)
			}
		})
	}
}

func TestEntryPath(t *testing.T) {
	if p, err := EntryPath("/d/class/mk"); err != nil || p != filepath.Join("/d/class", "mk.json") {
		t.Errorf("EntryPath = %q, %v", p, err)
	}
}
