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

	"github.com/moby/sys/mountinfo"
	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// The hook tests run mountkeeper as an OCI hook, installed as configs/examples shows: under
// plain runc (runc run of a busybox bundle whose config.json carries the hook) and under
// containerd (a runtime handler whose base_runtime_spec carries it, NRI off).

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
				t.Errorf("class mounts leaked into the host's namespace:\n%s", mountLines(leaked))
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
			if len(mountsBelow(t, string(ctr), rootfs)) == 0 {
				t.Fatalf("the wrapper saved no mounts of the container:\n%s", ctr)
			}
			left := append(mountsBelow(t, string(ctr), rootfs+"/vol"), mountsBelow(t, string(ctr), rootfs+"/data")...)
			if len(left) > 0 {
				t.Errorf("class mounts left in the container after the failure:\n%s", mountLines(left))
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
	if leaked := hostMounts(t, c.Dir()); slices.ContainsFunc(leaked, func(m *mountinfo.Info) bool { return strings.Contains(mountLine(m), "/vol/") }) {
		t.Errorf("class mounts in the host's namespace:\n%s", mountLines(leaked))
	}
}
