//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// TestOperations runs the plugin as an operator does on a fleet: its config in a ConfigMap-style
// directory, --listen on a unix socket. Readiness follows the runtime's connection; a ..data
// swap and a SIGHUP each reload the config; an invalid config is refused, the old one stays in
// force, and both `mountkeeper status` and the metrics show it.
func TestOperations(t *testing.T) {
	// The plugin is the test's own, on a ConfigMap-style directory and with --listen.
	n := newNodeWithoutPlugin(t, harness.KindContainerd, []string{"mk-ops-a", "mk-ops-b"}, "", "")
	for _, d := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(n.src(), d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	class := func(name string) string {
		return fmt.Sprintf("stateDir: %s\nruntimeClasses:\n  %s:\n    mounts: [{source: %s, destination: /%s}]\n", filepath.Join(n.dir, "state"), name, filepath.Join(n.src(), name[len(name)-1:]), name)
	}
	plugin := startConfigMapPlugin(t, n, class("mk-ops-a"))
	update, sock := plugin.update, plugin.sock

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	get := func(path string) (int, string) {
		resp, err := client.Get("http://mk" + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		testsupport.Eventually(t, 20*time.Second, 100*time.Millisecond, what, ok)
	}
	classes := func() string { return fmt.Sprint(plugin.status().Classes) }
	reloads := func() string {
		if r := plugin.status().LastReload; r != nil {
			return fmt.Sprint(*r)
		}
		return ""
	}

	if code, body := get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d %s", code, body)
	}
	waitFor("/readyz 200 while connected", func() bool { code, _ := get("/readyz"); return code == 200 })
	if err := n.ctrd.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor("/readyz 503 while containerd is down", func() bool { code, _ := get("/readyz"); return code == 503 })
	if err := n.ctrd.Start(n.ctx); err != nil {
		t.Fatal(err)
	}
	waitFor("/readyz 200 after reconnecting", func() bool { code, _ := get("/readyz"); return code == 200 })

	update(class("mk-ops-b")) // the ConfigMap way: a new ..<timestamp> dir and a ..data swap
	waitFor("the ..data swap to reload", func() bool { return classes() == "[mk-ops-b]" })
	if _, err := n.runContainer("mk-ops-b", "after-reload"); err != nil {
		t.Fatalf("class of the reloaded config: %v", err)
	}
	if out, _ := n.sh(n.containersOf("mk-ops-b")[0], "test -d /mk-ops-b && echo mounted"); strings.TrimSpace(out) != "mounted" {
		t.Errorf("a container of the reloaded class lacks its mount: %q", out)
	}

	before := reloads()
	if err := plugin.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("SIGHUP to reload", func() bool { return reloads() != before })

	update("runtimeClasses: {mk-ops-a: {mounts: [{source: relative/path, destination: /a}]}}\n")
	waitFor("the invalid config to be refused", func() bool {
		r := plugin.status().LastReload
		return r != nil && !r.Applied
	})
	if c := classes(); c != "[mk-ops-b]" {
		t.Errorf("after an invalid reload the classes are %s, want the old [mk-ops-b]", c)
	}
	out, err := exec.Command(n.bin, "status", "--address", "unix:"+sock).Output()
	if err != nil || !strings.Contains(string(out), "REFUSED") || !strings.Contains(string(out), "relative/path") {
		t.Errorf("status text after an invalid reload: %v\n%s", err, out)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{`mountkeeper_config_reloads_total{result="rejected"} 1`, "mountkeeper_config_last_reload_success 0",
		`mountkeeper_runtime_reconnects_total 1`, `mountkeeper_create_container_decisions_total{class="mk-ops-b",outcome="added",reason=""} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if !strings.Contains(plugin.Log(), "config reload refused") {
		t.Error("the refused reload is not in the log")
	}
}
