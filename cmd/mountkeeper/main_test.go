package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("runtimeClasses:\n  fast:\n    mounts: [{source: "+src+", destination: /data}]\n"), 0o644)
	os.WriteFile(bad, []byte("runtimeClasses:\n  fast:\n    mounts: [{source: "+src+", destination: data, propagaton: rshared}]\n"), 0o644)
	spec := `{"ociVersion":"1.2.0","process":{"args":["sh"]},"vendorExtension":{"keep":true},"mounts":[{"destination":"/proc","type":"proc","source":"proc"}]}`

	tests := []cliCase{
		{name: "version", args: []string{"version"}, stdout: []string{"mountkeeper dev"}},
		{name: "no command", args: nil, code: 2, stderr: []string{"usage: mountkeeper"}},
		{name: "unknown command", args: []string{"mount"}, code: 2, stderr: []string{`unknown command "mount"`}},
		{name: "unknown flag", args: []string{"validate", "--cfg", good}, code: 2, stderr: []string{"flag provided but not defined: -cfg"}},
		{name: "validate good", args: []string{"validate", "--config", good}, stdout: []string{"OK: 1 runtime classes (fast), 1 mounts"}},
		{name: "validate bad names the key", args: []string{"validate", "--config", bad}, code: 1, stderr: []string{bad, "field propagaton not found"}},
		{name: "validate missing file", args: []string{"validate", "--config", filepath.Join(dir, "nope.yaml")}, code: 1, stderr: []string{"nope.yaml: no such file"}},
		{name: "render adds the mount and keeps unknown fields", args: []string{"render", "--config", good, "--runtime-class", "fast"}, stdin: spec,
			stdout: []string{`"destination": "/data"`, `"rprivate"`, `"vendorExtension"`, `"keep": true`}},
		{name: "render unknown class", args: []string{"render", "--config", good, "--runtime-class", "kata"}, stdin: spec, code: 1,
			stderr: []string{`no runtime class "kata"`, "(it has: fast)"}},
		{name: "render not JSON", args: []string{"render", "--config", good, "--runtime-class", "fast"}, stdin: "mounts: []", code: 1,
			stderr: []string{"parse OCI spec"}},
		{name: "nri bad log format", args: []string{"nri", "--log-format", "xml"}, code: 1, stderr: []string{`--log-format "xml"`}},
	}
	runCLICases(t, tests)
}

func TestRenderOutputIsJSON(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("runtimeClasses:\n  default:\n    mounts: [{source: "+dir+", destination: /data, readOnly: true}]\n"), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"render", "--config", cfg}, strings.NewReader(`{"ociVersion":"1.2.0"}`), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var doc struct {
		Mounts []struct {
			Destination string
			Options     []string
		}
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if len(doc.Mounts) != 1 || doc.Mounts[0].Destination != "/data" || strings.Join(doc.Mounts[0].Options, ",") != "rbind,rprivate,ro" {
		t.Errorf("mounts = %+v", doc.Mounts)
	}
}

// A pre-registered plugin gets no arguments: with the runtime's socket in the environment that
// means `nri`, which then fails here only because the fake socket is not a connection.
func TestNoArgumentsFromTheRuntimeMeansNRI(t *testing.T) {
	defer func(f func() bool) { launchedByRuntime = f }(launchedByRuntime)
	launchedByRuntime = func() bool { return true }
	t.Setenv("NRI_PLUGIN_SOCKET", "not-a-number")
	t.Setenv("NRI_PLUGIN_NAME", "mountkeeper")
	t.Setenv("NRI_PLUGIN_IDX", "10")
	runCLICases(t, []cliCase{{name: "no arguments", code: 1,
		stderr: []string{"invalid socket in environment (NRI_PLUGIN_SOCKET=\"not-a-number\")"}}})
}

func TestCheckCommand(t *testing.T) {
	if _, err := os.Stat("/sbin/mount.nfs"); err == nil {
		testenv.Skip(t, "this node has mount.nfs: the check would pass its helper line")
	}
	dir := t.TempDir()
	nfs := filepath.Join(dir, "nfs.yaml")
	os.WriteFile(nfs, []byte("runtimeClasses:\n  nfs:\n    mounts: [{type: nfs, source: \"127.0.0.1:/export\", destination: /data, options: [port=1]}]\n"), 0o644)
	nfsPassword := filepath.Join(dir, "nfs-password.yaml")
	os.WriteFile(nfsPassword, []byte("runtimeClasses:\n  nfs:\n    mounts: [{type: nfs, source: \"127.0.0.1:/export\", destination: /data, options: [port=1, password=hunter2]}]\n"), 0o644)
	bind := filepath.Join(dir, "bind.yaml")
	os.WriteFile(bind, []byte("runtimeClasses:\n  b:\n    mounts: [{source: /srv, destination: /srv}]\n"), 0o644)
	runCLICases(t, []cliCase{
		{name: "nfs on a node without it", args: []string{"check", "--config", nfs}, code: 1,
			stdout: []string{`runtime class "nfs": nfs 127.0.0.1:/export -o port=1`, "FIX  helper and kernel: mount.nfs", "nfs-common", "127.0.0.1:1 does not answer"},
			stderr: []string{"problems found"}},
		{name: "an inline password is refused", args: []string{"check", "--config", nfsPassword}, code: 1,
			stderr: []string{"option 2 (password) would put a secret on command lines", "use Kerberos (sec=krb5) instead"}},
		{name: "no network mounts", args: []string{"check", "--config", bind}, stdout: []string{"no network filesystem mounts to check"}},
	})
}

// TestHostNamespacesFlag: --host-namespaces is an ordinary boolean flag, in every spelling the
// flag package takes (before, "--host-namespaces=true" was accepted and then ignored).
func TestHostNamespacesFlag(t *testing.T) {
	var cases []cliCase
	for _, spelling := range []string{"--host-namespaces", "-host-namespaces", "--host-namespaces=true"} {
		cases = append(cases, cliCase{name: spelling, args: []string{"nri", spelling, "--host-namespaces-pid=x"}, code: 1,
			stderr: []string{`--host-namespaces-pid "x": not a process ID`}})
	}
	runCLICases(t, cases)
}
