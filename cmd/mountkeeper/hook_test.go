package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHookCommand(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte("runtimeClasses:\n  fast:\n    mounts: [{source: "+src+", destination: /data}]\n"), 0o644)
	spec := `{"ociVersion":"1.3.0","root":{"path":"rootfs"},"vendorExtension":{"keep":true}}`
	bundle := filepath.Join(dir, "bundle")
	os.Mkdir(bundle, 0o755)
	os.WriteFile(filepath.Join(bundle, "config.json"), []byte("not json"), 0o644)
	state := `{"ociVersion":"1.3.0","id":"c1","status":"creating","pid":1,"bundle":"` + bundle + `"}`

	tests := []cliCase{
		{name: "no stage", args: []string{"hook"}, code: 2, stderr: []string{"no hook stage given", "usage: mountkeeper hook <stage>"}},
		{name: "unknown stage", args: []string{"hook", "poststart"}, code: 2, stderr: []string{`hook stage "poststart" is not supported`}},
		{name: "wrong case", args: []string{"hook", "createruntime"}, code: 2, stderr: []string{`did you mean "createRuntime"?`}},
		{name: "extra argument", args: []string{"hook", "prestart", "now"}, code: 2, stderr: []string{"unexpected arguments: now"}},
		{name: "unknown flag", args: []string{"hook", "prestart", "--class", "x"}, code: 2, stderr: []string{"flag provided but not defined: -class"}},
		{name: "help", args: []string{"hook", "--help"}, code: 0, stderr: []string{"prestart, createRuntime", "precreate", "-runtime-class", "-trust-runtime-handler-annotation"}},
		{name: "precreate, stage first", args: []string{"hook", "precreate", "--config", cfg, "--runtime-class", "fast"}, stdin: spec,
			stdout: []string{`"destination": "/data"`, `"vendorExtension"`}},
		{name: "precreate, flags first", args: []string{"hook", "--config", cfg, "--runtime-class", "fast", "precreate"}, stdin: spec,
			stdout: []string{`"destination": "/data"`}},
		{name: "precreate, flags around the stage", args: []string{"hook", "--config", cfg, "precreate", "--runtime-class", "fast"}, stdin: spec,
			stdout: []string{`"destination": "/data"`}},
		{name: "two stages", args: []string{"hook", "--config", cfg, "precreate", "prestart"}, code: 2, stderr: []string{"unexpected arguments: prestart"}},
		{name: "precreate unknown class", args: []string{"hook", "precreate", "--config", cfg, "--runtime-class", "kata", "--error-log", "none"}, stdin: spec, code: 1,
			stderr: []string{`mountkeeper: runtime class "kata", container (unnamed): the class is not in the config (the class came from --runtime-class; the config has: fast)`}},
		{name: "precreate default class missing", args: []string{"hook", "precreate", "--config", cfg, "--trust-runtime-handler-annotation", "--error-log", "none"}, stdin: spec, code: 1,
			stderr: []string{`runtime class "default", container (unnamed): the class is not in the config (the class came from default: no --runtime-class`}},
		{name: "precreate without --runtime-class", args: []string{"hook", "precreate", "--config", cfg, "--error-log", "none"}, stdin: spec, code: 1,
			stderr: []string{`mountkeeper: container (unnamed): no --runtime-class: hook mode needs it to name the runtime class`}},
		{name: "missing config", args: []string{"hook", "precreate", "--config", filepath.Join(dir, "nope.yaml"), "--error-log", "none"}, stdin: spec, code: 1,
			stderr: []string{"nope.yaml: no such file"}},
		{name: "prestart malformed state", args: []string{"hook", "prestart", "--config", cfg, "--runtime-class", "fast", "--error-log", "none"}, stdin: "{", code: 1,
			stderr: []string{"mountkeeper: parse the OCI state on stdin: unexpected end of JSON input"}},
		{name: "createRuntime config.json not JSON", args: []string{"hook", "createRuntime", "--config", cfg, "--runtime-class", "fast", "--error-log", "none"}, stdin: state, code: 1,
			stderr: []string{"mountkeeper: container c1: " + bundle + "/config.json: not an OCI config"}},
	}
	// The cases that fail write no refusal into the developer's journal (--error-log's
	// default, syslog): TestHookErrorLog tests that report.
	runCLICases(t, tests)
}

// TestHookErrorLog: a refusal also lands in --error-log, since podman drops a precreate hook's
// stderr and shows only "exit status 1".
func TestHookErrorLog(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("runtimeClasses:\n  fast:\n    mounts: [{source: "+dir+", destination: /data}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "hook.log")
	spec := `{"ociVersion":"1.3.0","root":{"path":"rootfs"}}`
	runCLICases(t, []cliCase{{name: "refused precreate", args: []string{"hook", "precreate", "--config", cfg, "--runtime-class", "kata", "--error-log", logFile},
		stdin: spec, code: 1, stderr: []string{`runtime class "kata"`}}})
	got, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(got), `mountkeeper: runtime class "kata", container (unnamed): the class is not in the config`) {
		t.Errorf("error log holds %q (%v), want the refusal", got, err)
	}
	if strings.Count(string(got), "\n") != 1 {
		t.Errorf("error log holds %d lines, want one per refusal", strings.Count(string(got), "\n"))
	}
}
