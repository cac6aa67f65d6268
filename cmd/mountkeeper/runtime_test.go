package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

type recordingRestarter struct{ units []string }

func (r *recordingRestarter) Restart(_ context.Context, unit string) error {
	r.units = append(r.units, unit)
	return nil
}

// TestRuntimeConfigureCLI: --dry-run prints a unified diff and writes nothing; a real run
// writes, and restarts containerd through the restarter only with --restart; unconfigure
// gives the main file back byte for byte.
func TestRuntimeConfigureCLI(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "config.toml")
	orig := "# the operator's\nversion = 3\n"
	os.WriteFile(main, []byte(orig), 0o600)
	cfg := filepath.Join(dir, "mk.yaml")
	os.WriteFile(cfg, []byte("runtimeClasses:\n  mk:\n    mounts: [{source: /srv, destination: /srv}]\n"), 0o644)
	wrapper := filepath.Join(dir, "mountkeeper-runtime")
	os.WriteFile(wrapper, []byte("binary"), 0o755)
	common := []string{"--runtime", "containerd", "--config-file", main, "--drop-in", filepath.Join(dir, "conf.d/99-mountkeeper.toml"), "--install-dir", filepath.Join(dir, "bin")}
	run := func(args ...string) (string, *recordingRestarter) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		r := &recordingRestarter{}
		if err := runRuntimeWith(args, &stdout, &stderr, r); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, stderr.String())
		}
		return stdout.String(), r
	}
	out, r := run(append([]string{"configure", "--config", cfg, "--runtime-binary", wrapper, "--dry-run"}, common...)...)
	for _, want := range []string{"--- " + main + "\n+++ " + main + "\n@@ -1,2 +1,3 @@\n # the operator's\n version = 3\n+imports = [", "--- /dev/null\n+++ " + filepath.Join(dir, "conf.d/99-mountkeeper.toml"), "install " + filepath.Join(dir, "bin/mountkeeper-runtime"), "# then: restart containerd"} {
		if !strings.Contains(out, want) {
			t.Errorf("--dry-run printed\n%s\nwant it to hold\n%s", out, want)
		}
	}
	if got, _ := os.ReadFile(main); string(got) != orig || len(r.units) != 0 {
		t.Fatalf("--dry-run changed the config or restarted (%q)", r.units)
	}
	if _, err := os.Stat(filepath.Join(dir, "bin")); err == nil {
		t.Fatal("--dry-run installed the wrapper")
	}
	out, r = run(append([]string{"configure", "--config", cfg, "--runtime-binary", wrapper}, common...)...)
	if !strings.Contains(out, "restart needed: containerd reads its config only at start") || len(r.units) != 0 {
		t.Errorf("configure without --restart: %q, restarted %q", out, r.units)
	}
	out, r = run(append([]string{"configure", "--config", cfg, "--runtime-binary", wrapper, "--restart"}, common...)...)
	if out != "nothing to change\n" || len(r.units) != 0 {
		t.Errorf("a second configure: %q, restarted %q", out, r.units)
	}
	out, r = run(append([]string{"unconfigure", "--restart"}, common...)...)
	if !reflect.DeepEqual(r.units, []string{"containerd"}) || !strings.Contains(out, "restarted containerd") {
		t.Errorf("unconfigure --restart: %q, restarted %q", out, r.units)
	}
	if got, _ := os.ReadFile(main); string(got) != orig {
		t.Errorf("after unconfigure the main file is\n%q\nwant\n%q", got, orig)
	}
}

// TestRuntimeConfigureBadClass: a class name that is not a handler name is refused, naming it.
func TestRuntimeConfigureBadClass(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mk.yaml")
	os.WriteFile(cfg, []byte("runtimeClasses:\n  ../../x:\n    mounts: [{source: /srv, destination: /srv}]\n"), 0o644)
	var stdout, stderr bytes.Buffer
	err := runRuntimeWith([]string{"configure", "--runtime", "containerd", "--config", cfg, "--config-file", filepath.Join(dir, "c.toml"), "--install-dir", filepath.Join(dir, "bin"), "--drop-in", filepath.Join(dir, "d.toml"), "--runtime-binary", cfg}, &stdout, &stderr, &recordingRestarter{})
	if err == nil || !strings.Contains(err.Error(), `runtime class "../../x": not a runtime handler name`) {
		t.Errorf("configure with class ../../x: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("a refused configure wrote files: %v", entries)
	}
}

// TestRuntimeConfigureOldFlags: a manifest written for the base-spec guard (--install-hook,
// --base-spec-dir) still configures, and is told its hook flags are ignored.
func TestRuntimeConfigureOldFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mk.yaml")
	os.WriteFile(cfg, []byte("runtimeClasses:\n  mk:\n    mounts: [{source: /srv, destination: /srv}]\n"), 0o644)
	wrapper := filepath.Join(dir, "mountkeeper-runtime")
	os.WriteFile(wrapper, []byte("binary"), 0o755)
	os.WriteFile(filepath.Join(dir, "c.toml"), []byte("version = 3\n"), 0o644)
	var stdout, stderr bytes.Buffer
	err := runRuntimeWith([]string{"configure", "--runtime", "containerd", "--config", cfg, "--config-file", filepath.Join(dir, "c.toml"),
		"--drop-in", filepath.Join(dir, "d.toml"), "--install-dir", filepath.Join(dir, "bin"), "--runtime-binary", wrapper,
		"--base-spec-dir", filepath.Join(dir, "specs"), "--install-hook", filepath.Join(dir, "bin", "mountkeeper-hook")}, &stdout, &stderr, &recordingRestarter{})
	if err != nil || !strings.Contains(stderr.String(), "note: --install-hook is ignored") {
		t.Errorf("configure with the old flags: %v\n%s", err, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "bin", "class", "mk")); err != nil {
		t.Errorf("no class link: %v", err)
	}
}

// TestRuntimeConfigurePrintFragment: --print-fragment prints the drop-in a CRI-O whose config
// the OS owns needs (OpenShift's 00-default read as CRI-O reads it) and writes nothing.
func TestRuntimeConfigurePrintFragment(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mk.yaml")
	os.WriteFile(cfg, []byte("runtimeClasses:\n  mk:\n    mounts: [{source: /srv, destination: /srv}]\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "crio.conf.d"), 0o755)
	os.WriteFile(filepath.Join(dir, "crio.conf.d", "00-default"), []byte("[crio.runtime]\ndefault_runtime = 'runc'\n[crio.runtime.runtimes.runc]\nruntime_path = '/usr/bin/runc'\nruntime_root = '/run/runc'\n"), 0o644)
	var stdout, stderr bytes.Buffer
	err := runRuntimeWith([]string{"configure", "--runtime", "crio", "--runtime-command", filepath.Join(dir, "no-crio"), "--config", cfg, "--config-file", filepath.Join(dir, "crio.conf"),
		"--config-dir", filepath.Join(dir, "crio.conf.d"), "--install-dir", filepath.Join(dir, "bin"), "--print-fragment"}, &stdout, &stderr, &recordingRestarter{})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, want := range []string{"[crio.runtime.runtimes.mk]", "runtime_path = '" + filepath.Join(dir, "bin", "class", "mk") + "'", "runtime_root = '/run/runc'"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("fragment lacks %s:\n%s", want, stdout.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bin")); err == nil {
		t.Error("--print-fragment installed something")
	}
	if names, _ := os.ReadDir(filepath.Join(dir, "crio.conf.d")); len(names) != 1 {
		t.Errorf("--print-fragment wrote to the drop-in directory: %v", names)
	}
}
