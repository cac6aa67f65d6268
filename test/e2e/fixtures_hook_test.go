//go:build e2e

package e2e

import (
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

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

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

func (w *hookWorld) writeConfig(classes ...string) {
	w.t.Helper()
	cfg := "runtimeClasses:\n" + strings.Join(classes, "")
	if err := os.WriteFile(w.config, []byte(cfg), 0o644); err != nil {
		w.t.Fatal(err)
	}
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

// sshfsClass starts an sshd whose export holds "hello" (startHelloSSHD), and writes a
// config with class class mounting it over sshfs at /data. It returns the spec and its host
// path.
func (w *hookWorld) sshfsClass(class string) (netspec.Spec, string) {
	t := w.t
	t.Helper()
	sshd := startHelloSSHD(t, w.dir)
	spec := netspec.Spec{Type: "fuse.sshfs", Source: "root@127.0.0.1:" + sshd.Export(), Options: sshd.ClientOptions()}
	spec.Options = netspec.WithFUSEDefaults(spec.Type, spec.Options) // as the config adds them
	t.Cleanup(func() {
		if err := harness.RemoveMountScope(spec.Key()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	stateDir := filepath.Join(w.dir, "state")
	cfg := fmt.Sprintf("stateDir: %s\nruntimeClasses:\n  %s:\n    mounts:\n      - {type: %s, source: %q, destination: /data, propagation: HostToContainer, options: [%s]}\n",
		stateDir, class, spec.Type, spec.Source, strings.Join(spec.Options, ", "))
	if err := os.WriteFile(w.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return spec, netmount.HostPath(stateDir, spec)
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
		m := mountIn(t, out, dst)
		if m == nil {
			t.Errorf("%s is not mounted in the container; mountinfo:\n%s", dst, out)
			continue
		}
		shared, _ := testsupport.Tag(m, "shared")
		master, _ := testsupport.Tag(m, "master")
		peer, slave := shared == group, master == group
		if peer != w.peer || slave != w.slave {
			t.Errorf("%s: peer of host group %s = %v, slave of it = %v; want %v, %v\n%s", dst, group, peer, slave, w.peer, w.slave, mountLine(m))
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

func variantName(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

// writeHooksD writes the example file into dir, its hook pointed at bin, config and class.
func writeHooksD(t *testing.T, file, dir, bin, config, class string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examples, file))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	w := &hookWorld{t: t, bin: bin, config: config}
	h := w.hooksDExample(file, class)
	doc["hook"] = h
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(file)), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// podman runs podman with the test's private storage.
type podman struct {
	t      *testing.T
	ctx    context.Context
	global []string
}

func (p *podman) run(args ...string) (string, error) {
	cmd := exec.CommandContext(p.ctx, "podman", append(append([]string{}, p.global...), args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (p *podman) execer(name string) harness.Execer {
	return func(ctx context.Context, cmd ...string) (string, string, int, error) {
		c := exec.CommandContext(ctx, "podman", append(append(append([]string{}, p.global...), "exec", name), cmd...)...)
		var stdout, stderr strings.Builder
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return stdout.String(), stderr.String(), ee.ExitCode(), nil
		}
		if err != nil {
			return "", "", -1, err
		}
		return stdout.String(), stderr.String(), 0, nil
	}
}

// removeCgroupParent removes what podman left of the cgroup parent in every hierarchy.
func removeCgroupParent(t *testing.T, parent string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
	if d := filepath.Join("/sys/fs/cgroup", parent); exists(d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		// Children first (podman's libpod-* and conmon groups), deepest first.
		var all []string
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		for i := len(all) - 1; i >= 0; i-- {
			if err := os.Remove(all[i]); err != nil && !os.IsNotExist(err) {
				t.Errorf("cleanup cgroup %s: %v", all[i], err)
			}
		}
	}
}
