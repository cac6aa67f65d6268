package netmount

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

func TestNeedsStatd(t *testing.T) {
	for _, c := range []struct {
		typ  string
		opts []string
		want bool
	}{
		{"nfs", []string{"vers=3"}, true},
		{"nfs", []string{"nfsvers=3", "hard"}, true},
		{"nfs", []string{"v3"}, true},
		{"nfs", nil, true}, // mount.nfs may fall back to v3
		{"nfs", []string{"vers=3", "nolock"}, false},
		{"nfs", []string{"vers=3", "local_lock=all"}, false},
		{"nfs", []string{"vers=3", "local_lock=flock"}, true},
		{"nfs", []string{"vers=4.2"}, false},
		{"nfs", []string{"nfsvers=4"}, false},
		{"nfs4", nil, false},
		{"cifs", nil, false},
	} {
		if got := needsStatd(netspec.Spec{Type: c.typ, Source: "srv:/x", Options: c.opts}); got != c.want {
			t.Errorf("needsStatd(%s %v) = %v, want %v", c.typ, c.opts, got, c.want)
		}
	}
}

// TestStartStatdThroughSystemd: with systemd, the node's rpc.statd is started through its own
// unit (rpc-statd.service, which nfs-common and nfs-utils install), never in a scope of the
// agent's; a refusal names the command and what systemctl said. The host has no rpc-statd.service
// (nfs-common would change what the suite's test of a node without the NFS client sees), so
// systemctl here is a script beside systemd-run that records its arguments: the unit's own
// behaviour is systemd's and nfs-utils'.
func TestStartStatdThroughSystemd(t *testing.T) {
	for _, tc := range []struct {
		name, script, wantErr string
	}{
		{"started", `echo "$@" >"$(dirname "$0")/args"`, ""},
		{"refused", `echo "$@" >"$(dirname "$0")/args"; echo "Unit rpc-statd.service not found." >&2; exit 5`,
			"systemctl start rpc-statd.service: exit status 5: Unit rpc-statd.service not found."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			l := &liveSystem{scoper: &SystemdScoper{Run: filepath.Join(dir, "systemd-run")}}
			err := l.startStatd(context.Background())
			if got := fmt.Sprint(err); (tc.wantErr == "") != (err == nil) || !strings.Contains(got, tc.wantErr) {
				t.Fatalf("startStatd: %v, want %q", err, tc.wantErr)
			}
			if args, err := os.ReadFile(filepath.Join(dir, "args")); err != nil || string(args) != "start rpc-statd.service\n" {
				t.Errorf("systemctl ran with %q (%v), want \"start rpc-statd.service\"", args, err)
			}
		})
	}
}
