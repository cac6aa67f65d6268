package netmount

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

type stubScoper struct{ Scoper }

func (stubScoper) Name() string { return "cgroup" }

func TestCheck(t *testing.T) {
	refused := func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("connection refused") }
	answers := func(context.Context, string, string) (net.Conn, error) { c, s := net.Pipe(); s.Close(); return c, nil }
	scoper := func() (Scoper, error) { return stubScoper{}, nil }
	noScope := func() (Scoper, error) { return nil, errors.New("no systemd and no cgroup2 mounted") }
	complete := fakeEnv{programs: map[string]bool{"mount": true, "sshfs": true}, helpers: map[string]bool{"mount.fuse": true},
		fss: map[string]bool{"fuse": true}, files: map[string]bool{"/dev/fuse": true}}
	nfsEnv := fakeEnv{programs: map[string]bool{"mount": true}, helpers: map[string]bool{"mount.nfs": true}, fss: map[string]bool{"nfs": true}}
	answersOn := func(addr string) dialFunc {
		return func(ctx context.Context, network, a string) (net.Conn, error) {
			if a != addr {
				return refused(ctx, network, a)
			}
			return answers(ctx, network, a)
		}
	}
	sshfs := netspec.Spec{Type: "fuse.sshfs", Source: "root@127.0.0.1:/srv", Options: []string{"port=2222", "IdentityFile=/etc/mk/id"}}

	tests := []struct {
		name   string
		env    fakeEnv
		scoper func() (Scoper, error)
		dial   dialFunc
		spec   netspec.Spec
		want   []string // one entry per finding: "OK <text>" or "FIX <text>" substrings
	}{
		{"all good", complete, scoper, answers, sshfs,
			[]string{"OK mount helper and kernel", "OK mounts run in their own cgroup scope", "OK 127.0.0.1:2222 answers"}},
		{"server down, no scope", complete, noScope, refused, sshfs,
			[]string{"OK mount helper", "FIX no systemd and no cgroup2", "FIX 127.0.0.1:2222 does not answer on TCP"}},
		{"nfs without helper or kernel", fakeEnv{programs: map[string]bool{"mount": true}}, scoper, answers, netspec.Spec{Type: "nfs", Source: "filer:/x"},
			[]string{"FIX mount.nfs", "FIX ", "OK mounts run", "OK filer:2049 answers"}},
		// Where the heal dials: an NFSv3 server whose rpcbind answers counts as answering.
		{"nfsv3, rpcbind answers", nfsEnv, scoper, answersOn("filer:111"), netspec.Spec{Type: "nfs", Source: "filer:/x", Options: []string{"vers=3"}},
			[]string{"OK mount helper", "OK mounts run", "OK filer:111 answers"}},
		{"nfsv3 server down", nfsEnv, scoper, refused, netspec.Spec{Type: "nfs", Source: "filer:/x", Options: []string{"vers=3"}},
			[]string{"OK mount helper", "OK mounts run", "FIX filer:2049 does not answer on TCP within 3s (connection refused), nor filer:111 (connection refused)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(tc.env, tc.scoper, tc.dial, tc.spec)
			var lines []string
			for _, f := range got {
				prefix := "FIX "
				if f.OK {
					prefix = "OK "
				}
				lines = append(lines, prefix+f.Text)
				if strings.Contains(f.Text, "hunter2") {
					t.Errorf("secret in finding: %q", f.Text)
				}
			}
			if len(lines) != len(tc.want) {
				t.Fatalf("findings %q, want %d like %q", lines, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w[:strings.Index(w, " ")+1]) || !strings.Contains(lines[i], w[strings.Index(w, " ")+1:]) {
					t.Errorf("finding %d = %q, want %q", i, lines[i], w)
				}
			}
		})
	}
}
