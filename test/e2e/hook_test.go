//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// The hook tests run mountkeeper as an OCI hook, installed as configs/examples shows: under
// plain runc (runc run of a busybox bundle whose config.json carries the hook) and under
// containerd (a runtime handler whose base_runtime_spec carries it, NRI off).

const examples = "../../configs/examples"

// hookWorld is one hook test's host side: a directory below /tmp with the mountkeeper-hook
// binary, the config, a private runc state root, and a shared tmpfs for the sources.
// Everything is removed when the test ends, failed or not.
type hookWorld struct {
	t      *testing.T
	ctx    context.Context
	dir    string
	bin    string
	config string
	host   string // shared tmpfs: the sources live below it
	runc   *harness.Runc
}

func newHookWorld(t *testing.T) *hookWorld {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	dir := harness.WorkDir(t, "mk-hook-") // cleaned up last: after the containers are gone
	var err error
	w := &hookWorld{t: t, ctx: ctx, dir: dir, config: filepath.Join(dir, "config.yaml"), host: filepath.Join(dir, "src", "host")}
	if w.bin, err = harness.BuildHook(dir); err != nil {
		t.Fatal(err)
	}
	if w.runc, err = harness.NewRunc(filepath.Join(dir, "runc")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.runc.Close(); err != nil {
			t.Errorf("cleanup runc containers: %v", err)
		}
	})
	if err := harness.MountTmpfs(w.host, "shared"); err != nil {
		t.Fatal(err)
	}
	return w
}

// sources makes host/<name>/{private,slave,shared} and returns host/<name>.
func (w *hookWorld) sources(name string) string {
	w.t.Helper()
	base := filepath.Join(w.host, name)
	for _, d := range []string{"private", "slave", "shared"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			w.t.Fatal(err)
		}
	}
	return base
}

// threeWayClass is a config class with the three propagations at /vol/<propagation>.
func threeWayClass(name, base string) string {
	return fmt.Sprintf(`  %s:
    mounts:
      - {source: %[2]s/private, destination: /vol/private, propagation: None}
      - {source: %[2]s/slave, destination: /vol/slave, propagation: HostToContainer}
      - {source: %[2]s/shared, destination: /vol/shared, propagation: Bidirectional}
`, name, base)
}

func (w *hookWorld) writeConfig(classes ...string) {
	w.t.Helper()
	cfg := "runtimeClasses:\n" + strings.Join(classes, "")
	if err := os.WriteFile(w.config, []byte(cfg), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// pointHook points a hook entry of an install example at the test's binary, config and
// class: the path, a --config after the stage, and the value of --runtime-class.
func pointHook(t *testing.T, h oci.Hook, bin, config, class string) oci.Hook {
	t.Helper()
	i := slices.Index(h.Args, "--runtime-class")
	if h.Path == "" || len(h.Args) < 3 || h.Args[1] != "hook" || i < 0 || i+1 >= len(h.Args) {
		t.Fatalf("example hook %+v is not `mountkeeper hook <stage> ... --runtime-class NAME`", h)
	}
	args := append([]string{}, h.Args[:3]...)
	args = append(args, "--config", config)
	args = append(args, h.Args[3:]...)
	args[i+3] = class // shifted by the two inserted
	h.Path, h.Args = bin, args
	return h
}

// runcExampleHooks returns the hooks of configs/examples/runc/config-hooks.json pointed at
// the test's binary, config and class.
func (w *hookWorld) runcExampleHooks(class string) *oci.Hooks {
	w.t.Helper()
	data, err := os.ReadFile(filepath.Join(examples, "runc", "config-hooks.json"))
	if err != nil {
		w.t.Fatal(err)
	}
	var doc struct{ Hooks oci.Hooks }
	if err := json.Unmarshal(data, &doc); err != nil {
		w.t.Fatalf("runc example: %v", err)
	}
	if len(doc.Hooks.CreateRuntime) != 1 {
		w.t.Fatalf("runc example: want one createRuntime hook, got %+v", doc.Hooks)
	}
	doc.Hooks.CreateRuntime[0] = pointHook(w.t, doc.Hooks.CreateRuntime[0], w.bin, w.config, class)
	return &doc.Hooks
}

// hooksDExample returns the hook entry of a hooks.d install example pointed at the test's
// binary, config and class, and checks the file is the 1.0.0 schema.
func (w *hookWorld) hooksDExample(file, class string) oci.Hook {
	w.t.Helper()
	data, err := os.ReadFile(filepath.Join(examples, file))
	if err != nil {
		w.t.Fatal(err)
	}
	var doc struct {
		Version string   `json:"version"`
		Hook    oci.Hook `json:"hook"`
		Stages  []string `json:"stages"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || doc.Version != "1.0.0" || len(doc.Stages) != 1 || doc.Stages[0] != doc.Hook.Args[2] {
		w.t.Fatalf("%s: not a hooks.d 1.0.0 file with one stage matching its hook (%v): %s", file, err, data)
	}
	return pointHook(w.t, doc.Hook, w.bin, w.config, class)
}

// bundle makes a bundle with a busybox rootfs and the config.json of `runc spec`, changed to
// run `sleep 3600` without a terminal, with CAP_SYS_ADMIN for the probes, then by edit.
func (w *hookWorld) bundle(name string, edit func(*oci.Spec)) string {
	w.t.Helper()
	b := filepath.Join(w.dir, "bundles", name)
	if err := harness.BusyboxRootfs(filepath.Join(b, "rootfs")); err != nil {
		w.t.Fatal(err)
	}
	spec, err := w.runc.Spec(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	spec.Process.Terminal = false
	spec.Process.Args = []string{"sleep", "3600"}
	c := spec.Process.Capabilities
	c.Bounding, c.Effective, c.Permitted = append(c.Bounding, "CAP_SYS_ADMIN"), append(c.Effective, "CAP_SYS_ADMIN"), append(c.Permitted, "CAP_SYS_ADMIN")
	if edit != nil {
		edit(spec)
	}
	if err := harness.WriteSpec(b, spec); err != nil {
		w.t.Fatal(err)
	}
	return b
}

// run starts the bundle's container; it is deleted when the test ends.
func (w *hookWorld) run(id, bundle string) error {
	w.t.Cleanup(func() {
		if err := w.runc.Delete(id); err != nil {
			w.t.Errorf("cleanup: %v", err)
		}
	})
	return w.runc.Run(w.ctx, id, bundle)
}

func (w *hookWorld) exec(id string) harness.Execer { return w.runc.Execer(id) }

// hostMounts returns the host's mountinfo lines whose mount point lies below dir.
func hostMounts(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return mountsBelow(string(data), dir)
}

func mountsBelow(mountinfo, dir string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, line)
		}
	}
	return out
}

// checkThreeWay checks the class mounts /vol/{private,slave,shared} of a running container,
// bound from base/{private,slave,shared} on the host: first their relation to the host's
// peer group in the container's mountinfo, then for real with probe mounts on both sides
// (the same three-way test as TestPropagation).
func checkThreeWay(t *testing.T, ctx context.Context, exec harness.Execer, base string) {
	t.Helper()
	group := peerGroup(t, base)
	out, _, code, err := exec(ctx, "cat", "/proc/self/mountinfo")
	if err != nil || code != 0 {
		t.Fatalf("read the container's mountinfo: exit %d, %v", code, err)
	}
	want := map[string]struct{ peer, slave bool }{
		"/vol/private": {false, false},
		"/vol/slave":   {false, true},
		"/vol/shared":  {true, false},
	}
	for dst, w := range want {
		line := mountinfoLine(out, dst)
		if line == "" {
			t.Errorf("%s is not mounted in the container; mountinfo:\n%s", dst, out)
			continue
		}
		fields, _, _ := strings.Cut(line, " - ")
		peer := slices.Contains(strings.Fields(fields), "shared:"+group)
		slave := slices.Contains(strings.Fields(fields), "master:"+group)
		if peer != w.peer || slave != w.slave {
			t.Errorf("%s: peer of host group %s = %v, slave of it = %v; want %v, %v\n%s", dst, group, peer, slave, w.peer, w.slave, line)
		}
	}
	seenWant := map[string]harness.Seen{
		"private": {HostToContainer: false, ContainerToHost: false},
		"slave":   {HostToContainer: true, ContainerToHost: false},
		"shared":  {HostToContainer: true, ContainerToHost: true},
	}
	for _, d := range []string{"private", "slave", "shared"} {
		got, err := harness.ProbePropagationWith(ctx, exec, filepath.Join(base, d), "/vol/"+d)
		if err != nil {
			t.Fatalf("probe /vol/%s: %v", d, err)
		}
		if got != seenWant[d] {
			t.Errorf("/vol/%s: saw %+v, want %+v", d, got, seenWant[d])
		}
	}
}

// TestHookRuncPropagation runs busybox containers under plain runc with the hook from the
// runc install example, for each rootfsPropagation a config.json may carry: the class mounts
// appear with the asked propagation, nothing shows on the host, and a container without the
// hook gets nothing.
func TestHookRuncPropagation(t *testing.T) {
	w := newHookWorld(t)
	variants := []string{"", "rslave", "rshared", "rprivate"}
	var classes []string
	for _, v := range append(variants, "hooksd-prestart", "podman-precreate") {
		classes = append(classes, threeWayClass("mk-"+variantName(v), w.sources(variantName(v))))
	}
	w.writeConfig(classes...)

	for _, v := range variants {
		t.Run("rootfsPropagation="+variantName(v), func(t *testing.T) {
			name := variantName(v)
			id := "mk-hook-" + name
			bundle := w.bundle(name, func(s *oci.Spec) {
				s.Hooks = w.runcExampleHooks("mk-" + name)
				s.Linux.RootfsPropagation = v
			})
			if err := w.run(id, bundle); err != nil {
				t.Fatalf("runc run: %v", err)
			}
			checkThreeWay(t, w.ctx, w.exec(id), filepath.Join(w.host, name))
			if leaked := hostMounts(t, filepath.Join(bundle, "rootfs")); len(leaked) > 0 {
				t.Errorf("class mounts leaked into the host's namespace:\n%s", strings.Join(leaked, "\n"))
			}
		})
	}

	// The hooks.d example's entry (stage prestart), as runc runs it from hooks.prestart.
	t.Run("hooks.d entry as a prestart hook", func(t *testing.T) {
		h := w.hooksDExample("hooks.d/mountkeeper-runc-mountkeeper.json", "mk-hooksd-prestart")
		bundle := w.bundle("hooksd-prestart", func(s *oci.Spec) { s.Hooks = &oci.Hooks{Prestart: []oci.Hook{h}} })
		if err := w.run("mk-hook-hooksd", bundle); err != nil {
			t.Fatalf("runc run: %v", err)
		}
		checkThreeWay(t, w.ctx, w.exec("mk-hook-hooksd"), filepath.Join(w.host, "hooksd-prestart"))
	})

	// The podman precreate example's entry, run as podman runs a precreate hook: config.json
	// on stdin, the config.json to use on stdout. runc then makes the mounts itself.
	t.Run("podman precreate entry rewrites config.json", func(t *testing.T) {
		h := w.hooksDExample("podman-hooks.d/mountkeeper-runc-mountkeeper-precreate.json", "mk-podman-precreate")
		bundle := w.bundle("podman-precreate", func(s *oci.Spec) { s.Annotations = map[string]string{"vendor.example/keep": "yes"} })
		config := filepath.Join(bundle, "config.json")
		in, err := os.ReadFile(config)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(h.Path)
		cmd.Args = h.Args
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("precreate hook: %v: %s", err, stderr.String())
		}
		if !bytes.Contains(out, []byte(`"vendor.example/keep": "yes"`)) || !bytes.Contains(out, []byte(`"rootfsPropagation": "rshared"`)) {
			t.Errorf("precreate output lost the annotation or did not raise rootfsPropagation:\n%s", out)
		}
		if err := os.WriteFile(config, out, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := w.run("mk-hook-precreate", bundle); err != nil {
			t.Fatalf("runc run: %v", err)
		}
		checkThreeWay(t, w.ctx, w.exec("mk-hook-precreate"), filepath.Join(w.host, "podman-precreate"))
	})

	t.Run("a container without the hook gets nothing", func(t *testing.T) {
		bundle := w.bundle("plain", nil)
		if err := w.run("mk-hook-plain", bundle); err != nil {
			t.Fatalf("runc run: %v", err)
		}
		out, _, _, err := w.runc.Exec(w.ctx, "mk-hook-plain", "cat", "/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "/vol/") {
			t.Errorf("container without the hook has class mounts:\n%s", out)
		}
	})
}

func variantName(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

// TestHookBadInput feeds the hook what a broken runtime setup would: each case exits
// non-zero with a clear message, and neither the host nor a running container gains a
// mount.
func TestHookBadInput(t *testing.T) {
	w := newHookWorld(t)
	src := w.sources("bad")
	w.writeConfig(threeWayClass("mk-bad", src))

	// A running container, no hook: the target the bad states point at.
	target := w.bundle("target", nil)
	if err := w.run("mk-hook-target", target); err != nil {
		t.Fatalf("runc run: %v", err)
	}
	pid, err := w.runc.Pid(w.ctx, "mk-hook-target")
	if err != nil {
		t.Fatal(err)
	}
	notJSON := filepath.Join(w.dir, "bundles", "notjson")
	os.MkdirAll(notJSON, 0o755)
	os.WriteFile(filepath.Join(notJSON, "config.json"), []byte("{\"ociVersion\": \"1.3.0\", \"root\": "), 0o644)
	state := func(bundle string) string {
		return fmt.Sprintf(`{"ociVersion":"1.3.0","id":"mk-hook-target","status":"creating","pid":%d,"bundle":%q}`, pid, bundle)
	}
	tests := []struct {
		name, stdin, class, want string
		trust                    bool
	}{
		{name: "malformed state JSON", stdin: `{"ociVersion":"1.3.0","pid":` + fmt.Sprint(pid) + `,"bundle":`, class: "mk-bad",
			want: "mountkeeper: parse the OCI state on stdin: unexpected end of JSON input: the runtime passes the container's state as JSON"},
		{name: "missing bundle", stdin: state(filepath.Join(w.dir, "gone")), class: "mk-bad",
			want: "mountkeeper: container mk-hook-target: the bundle " + filepath.Join(w.dir, "gone") + " from the OCI state does not exist"},
		{name: "config.json is not JSON", stdin: state(notJSON), class: "mk-bad",
			want: "mountkeeper: container mk-hook-target: " + notJSON + "/config.json: not an OCI config: unexpected end of JSON input"},
		{name: "runtime class not in the config", stdin: state(target), class: "mk-nope",
			want: `mountkeeper: runtime class "mk-nope", container mk-hook-target: the class is not in the config (the class came from --runtime-class; the config has: mk-bad)`},
		{name: "no class named", stdin: state(target),
			want: `mountkeeper: container mk-hook-target: no --runtime-class: hook mode needs it to name the runtime class (the io.kubernetes.cri-o.RuntimeHandler annotation, which a pod can set itself, is used only with --trust-runtime-handler-annotation)`},
		{name: "no class named, annotation trusted, no default class", stdin: state(target), trust: true,
			want: `runtime class "default", container mk-hook-target: the class is not in the config (the class came from default: no --runtime-class and no io.kubernetes.cri-o.RuntimeHandler annotation;`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hostBefore, ctrBefore := readMountinfo(t, "self"), readMountinfo(t, fmt.Sprint(pid))
			args := []string{"hook", "createRuntime", "--config", w.config}
			if tt.class != "" {
				args = append(args, "--runtime-class", tt.class)
			}
			if tt.trust {
				args = append(args, "--trust-runtime-handler-annotation")
			}
			cmd := exec.Command(w.bin, args...)
			cmd.Stdin = strings.NewReader(tt.stdin)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if err == nil {
				t.Fatal("the hook succeeded")
			}
			if got := strings.TrimSpace(stderr.String()); !strings.Contains(got, tt.want) || strings.Contains(got, "\n") {
				t.Errorf("stderr\ngot:  %s\nwant one line containing: %s", got, tt.want)
			}
			if hostAfter := readMountinfo(t, "self"); hostAfter != hostBefore {
				t.Errorf("the host's mounts changed:\nbefore:\n%s\nafter:\n%s", hostBefore, hostAfter)
			}
			if ctrAfter := readMountinfo(t, fmt.Sprint(pid)); ctrAfter != ctrBefore {
				t.Errorf("the container's mounts changed:\nbefore:\n%s\nafter:\n%s", ctrBefore, ctrAfter)
			}
		})
	}
}

func readMountinfo(t *testing.T, pid string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// wrapperScript runs the hook given as arguments on the OCI state it reads, then saves the
// container's mountinfo as it is right after the hook (runc tears the namespace down when a
// hook fails), and exits with the hook's status.
const wrapperScript = `state=$(cat)
pid=$(printf '%s' "$state" | sed -n 's/.*"pid":\([0-9][0-9]*\).*/\1/p')
printf '%s' "$state" | "$@"
rc=$?
cat "/proc/$pid/mountinfo" > "$MK_MOUNTINFO"
exit $rc
`

// TestHookRuncRefusesEscapes runs containers whose image plants a symlink out of the rootfs
// at a class destination: runc run fails with mountkeeper's message, the mounts made before
// the bad one are undone, no mount point is left behind, and nothing shows on the host.
func TestHookRuncRefusesEscapes(t *testing.T) {
	w := newHookWorld(t)
	src := w.sources("escape")
	// Mounted parents first: /vol/first and /vol/first/nested are fine, then
	// /data/mk-hook-e2e/escape/x escapes through the /data symlink of the image.
	w.writeConfig(fmt.Sprintf(`  mk-escape:
    mounts:
      - {source: %[1]s/private, destination: /vol/first, propagation: None}
      - {source: %[1]s/shared, destination: /vol/first/nested, propagation: Bidirectional}
      - {source: %[1]s/slave, destination: /data/mk-hook-e2e/escape/x, propagation: HostToContainer}
`, src))
	outside := filepath.Join(w.dir, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, link, class, want string
	}{
		{name: "absolute symlink /data -> /etc", link: "/etc", class: "mk-escape",
			want: `mount ` + src + `/slave -> /data/mk-hook-e2e/escape/x (rslave): destination /data/mk-hook-e2e/escape/x: /data is a symlink to "/etc", which leads out of the container's rootfs`},
		{name: "absolute symlink to a host directory", link: outside, class: "mk-escape",
			want: `/data is a symlink to "` + outside + `", which leads out of the container's rootfs`},
		{name: "relative symlink climbing out", link: "../../../../../../../../etc", class: "mk-escape",
			want: `/data is a symlink to "../../../../../../../../etc", which leads out of the container's rootfs`},
		{name: "runtime class not in the config", link: "/etc", class: "mk-nope",
			want: `the class is not in the config (the class came from --runtime-class; the config has: mk-escape)`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("escape%d", i)
			saved := filepath.Join(w.dir, name+".mountinfo")
			hook := w.runcExampleHooks(tt.class).CreateRuntime[0]
			bundle := w.bundle(name, func(s *oci.Spec) {
				s.Hooks = &oci.Hooks{CreateRuntime: []oci.Hook{{
					Path: "/bin/sh",
					Args: append([]string{"sh", "-c", wrapperScript, "mk-wrapper", hook.Path}, hook.Args[1:]...),
					Env:  []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "MK_MOUNTINFO=" + saved},
				}}}
			})
			rootfs := filepath.Join(bundle, "rootfs")
			if err := os.Symlink(tt.link, filepath.Join(rootfs, "data")); err != nil {
				t.Fatal(err)
			}
			hostBefore := readMountinfo(t, "self")
			err := w.run("mk-hook-"+name, bundle)
			if err == nil {
				t.Fatal("the container started")
			}
			// runc logs the hook's stderr inside a quoted logrus field.
			if !strings.Contains(strings.ReplaceAll(err.Error(), `\"`, `"`), tt.want) {
				t.Errorf("runc run error\ngot:  %v\nwant it to contain: %s", err, tt.want)
			}
			if hostAfter := readMountinfo(t, "self"); hostAfter != hostBefore {
				t.Errorf("the host's mounts changed:\nbefore:\n%s\nafter:\n%s", hostBefore, hostAfter)
			}
			ctr, rerr := os.ReadFile(saved)
			if rerr != nil {
				t.Fatalf("the wrapper saved no mountinfo: %v", rerr)
			}
			if len(mountsBelow(string(ctr), rootfs)) == 0 {
				t.Fatalf("the wrapper saved no mounts of the container:\n%s", ctr)
			}
			left := append(mountsBelow(string(ctr), rootfs+"/vol"), mountsBelow(string(ctr), rootfs+"/data")...)
			if len(left) > 0 {
				t.Errorf("class mounts left in the container after the failure:\n%s", strings.Join(left, "\n"))
			}
			for _, p := range []string{rootfs + "/vol", src + "/private/nested", "/etc/mk-hook-e2e", outside + "/mk-hook-e2e"} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was created by the failed hook and is still there", p)
				}
			}
		})
	}
}

// TestHookContainerd installs the hook as configs/examples/containerd does: a runtime
// handler whose base_runtime_spec carries it, and no NRI plugin. Containers of that handler
// get the class mounts with the asked propagation; containers of the default handler none.
func TestHookContainerd(t *testing.T) {
	w := newHookWorld(t)
	base := w.sources("ctrd")
	w.writeConfig(threeWayClass("mk-hook", base))

	data, err := os.ReadFile(filepath.Join(examples, "containerd", "base-runtime-spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec oci.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("containerd example: %v", err)
	}
	if spec.Hooks == nil || len(spec.Hooks.CreateRuntime) != 1 {
		t.Fatalf("containerd example: want one createRuntime hook, got %+v", spec.Hooks)
	}
	spec.Hooks.CreateRuntime[0] = pointHook(t, spec.Hooks.CreateRuntime[0], w.bin, w.config, "mk-hook")
	baseSpec := filepath.Join(w.dir, "base-runtime-spec.json")
	out, _ := json.MarshalIndent(spec, "", "  ")
	if err := os.WriteFile(baseSpec, out, 0o644); err != nil {
		t.Fatal(err)
	}

	c, err := harness.Start(w.ctx, harness.Options{
		Handlers:         []string{"mk-hook"},
		BaseRuntimeSpecs: map[string]string{"mk-hook": baseSpec},
		Log:              containerdLog(),
	})
	t.Cleanup(func() {
		if t.Failed() && c != nil {
			if log, err := os.ReadFile(filepath.Join(c.Dir(), "containerd.log")); err == nil {
				t.Logf("containerd log (last 4 KiB):\n%s", lastBytes(log, 4096))
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("cleanup containerd: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	cri := c.CRI()
	runCtr := func(handler, name string) string {
		t.Helper()
		pod, err := cri.RunPod(w.ctx, harness.PodOptions{Name: name + "-pod", RuntimeHandler: handler})
		if err != nil {
			t.Fatalf("run pod with handler %q: %v", handler, err)
		}
		id, err := cri.CreateContainer(w.ctx, pod, harness.ContainerOptions{Name: name, Privileged: true})
		if err != nil {
			t.Fatalf("create container with handler %q: %v", handler, err)
		}
		if err := cri.StartContainer(w.ctx, id); err != nil {
			t.Fatalf("start container with handler %q: %v", handler, err)
		}
		return id
	}
	criExec := func(id string) harness.Execer {
		return func(ctx context.Context, cmd ...string) (string, string, int, error) {
			return cri.Exec(ctx, id, cmd...)
		}
	}

	t.Run("containers of the hook's handler get the class mounts", func(t *testing.T) {
		id := runCtr("mk-hook", "app")
		checkThreeWay(t, w.ctx, criExec(id), base)
	})
	t.Run("containers of the default handler get none", func(t *testing.T) {
		id := runCtr("", "plain")
		out, _, _, err := cri.Exec(w.ctx, id, "cat", "/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "/vol/") {
			t.Errorf("default-handler container has class mounts:\n%s", out)
		}
	})
	if leaked := hostMounts(t, c.Dir()); slices.ContainsFunc(leaked, func(l string) bool { return strings.Contains(l, "/vol/") }) {
		t.Errorf("class mounts in the host's namespace:\n%s", strings.Join(leaked, "\n"))
	}
}
