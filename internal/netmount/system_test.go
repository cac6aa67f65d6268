package netmount

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// sessionScoper runs commands in a session of their own and no particular cgroup: enough to
// test what liveSystem does around the helper, without root.
type sessionScoper struct{}

func (sessionScoper) Name() string { return "session" }
func (sessionScoper) Start(ctx context.Context, job Job) (*exec.Cmd, error) {
	cmd, err := sessionCommand(ctx, job)
	if err != nil {
		return nil, err
	}
	return cmd, cmd.Start()
}
func (sessionScoper) Remove(string) error { return nil }

// fakeMount writes a mount(8) stand-in running script and returns a liveSystem that uses it.
// The script gets mount's arguments: -t TYPE [-o OPTIONS] SOURCE TARGET.
func fakeMount(t *testing.T, env fakeEnv, script string) *liveSystem {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mount")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &liveSystem{env: mountAt{env, path}, scoper: sessionScoper{}}
}

// mountAt is an Env whose mount(8) is at path.
type mountAt struct {
	fakeEnv
	path string
}

func (m mountAt) LookPath(file string) (string, error) {
	if file == "mount" {
		return m.path, nil
	}
	return m.fakeEnv.LookPath(file)
}

func TestLiveSystemMountFailures(t *testing.T) {
	cifs := netspec.Spec{Type: "cifs", Source: "//srv/share", Options: []string{"username=bob%s3cr3tpw", "password=hunter2"}}
	nfs := netspec.Spec{Type: "nfs", Source: "srv:/export"}
	noNFS := fullEnv()
	delete(noNFS.helpers, "mount.nfs")
	tests := []struct {
		name    string
		env     fakeEnv
		spec    netspec.Spec
		script  string
		timeout time.Duration
		want    string        // the error, exactly
		maxTime time.Duration // a hang guard: held up by the helper's child, mount would return after the timeout or its 30s sleep
	}{
		{
			name:   "helper output is redacted",
			env:    fullEnv(),
			spec:   cifs,
			script: `echo "mount error(13): Permission denied for $4 (hunter2, s3cr3tpw)" >&2; exit 32`,
			want:   "mount: exit status 32: mount error(13): Permission denied for username=bob%***,password=*** (***, ***)",
		},
		{
			name:   "exit 32 for a missing helper names the package",
			env:    noNFS,
			spec:   nfs,
			script: `echo "mount: $4: bad option; for several filesystems (e.g. nfs, cifs) you might need a /sbin/mount.<type> helper program." >&2; exit 32`,
			want:   `mount.nfs (the helper "mount -t nfs" runs) not found: install nfs-common (Debian/Ubuntu) or nfs-utils (RHEL/Fedora)`,
		},
		{
			name:   "exit 32 for an unknown filesystem names the module",
			env:    func() fakeEnv { e := fullEnv(); delete(e.fss, "nfs"); return e }(),
			spec:   nfs,
			script: `echo "mount: $4: unknown filesystem type 'nfs'." >&2; exit 32`,
			want:   `the kernel does not support nfs (not in /proc/filesystems, no module for it): run "modprobe nfs", or use a kernel with nfs support`,
		},
		{
			name:   "exit 32 when the preflight still passes",
			env:    fullEnv(),
			spec:   nfs,
			script: `echo "mount: $3: unknown filesystem type 'nfs'." >&2; exit 32`,
			want:   "mount: exit status 32: mount: srv:/export: unknown filesystem type 'nfs'. (though the preflight found the helper and kernel support for nfs)",
		},
		{
			name:    "a hung helper is killed with its process group",
			env:     fullEnv(),
			spec:    nfs,
			script:  `echo connecting >&2; sleep 30 & echo $! > "$4.pid"; wait`,
			timeout: 200 * time.Millisecond,
			want:    "mount did not finish within 200ms (helper killed): connecting",
			maxTime: 10 * time.Second,
		},
		{
			name:    "exit 0 without a mount",
			env:     fullEnv(),
			spec:    nfs,
			script:  `exit 0`,
			timeout: 200 * time.Millisecond,
			want:    "mount exited 0 after 0s but TARGET did not appear in mountinfo within 200ms",
			maxTime: 10 * time.Second,
		},
		{
			name:    "a child holding stderr does not hold up the result",
			env:     fullEnv(),
			spec:    nfs,
			script:  `sleep 30 & echo $! > "$4.pid"; echo "read: Connection reset by peer" >&2; exit 1`,
			timeout: 10 * time.Second,
			want:    "mount: exit status 1: read: Connection reset by peer",
			maxTime: 5 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := fakeMount(t, tt.env, tt.script)
			target := t.TempDir()
			pidFile := target + ".pid"
			t.Cleanup(func() {
				if data, err := os.ReadFile(pidFile); err == nil {
					pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
					syscall.Kill(pid, syscall.SIGKILL)
					os.Remove(pidFile)
				}
			})
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			err := l.mount(ctx, tt.spec, "mount-"+tt.spec.Key(), target, timeout)
			took := time.Since(start)
			want := strings.ReplaceAll(tt.want, "TARGET", target)
			if tt.name == "exit 0 without a mount" && err != nil {
				// "after Nms": the exit is quick, but not 0s on a busy machine.
				got := err.Error()
				if i, j := strings.Index(got, "after "), strings.Index(got, " but "); i >= 0 && j > i {
					got = got[:i] + "after 0s" + got[j:]
				}
				err = errors.New(got)
			}
			if err == nil || err.Error() != want {
				t.Errorf("mount error\ngot:  %v\nwant: %s", err, want)
			}
			if err != nil && (strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cr3tpw")) {
				t.Errorf("the error shows a secret: %v", err)
			}
			if tt.maxTime > 0 && took > tt.maxTime {
				t.Errorf("mount returned after %s, want at most %s", took, tt.maxTime)
			}
			if tt.timeout > 0 && tt.timeout < time.Second {
				// The helper's whole process group died with it.
				data, err := os.ReadFile(pidFile)
				if err == nil {
					pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
					for deadline := time.Now().Add(2 * time.Second); alive(pid) && time.Now().Before(deadline); {
						time.Sleep(10 * time.Millisecond)
					}
					if alive(pid) {
						t.Errorf("the helper's child %d survived the timeout", pid)
					}
				}
			}
		})
	}
}

// TestLiveSystemProbe: a probe answers what stat answers. That it is bounded (one stat left
// behind per hung path, not one per probe) is shown on a real hung FUSE daemon in TestSSHFS.
func TestLiveSystemProbe(t *testing.T) {
	l := &liveSystem{}
	if err := l.probe(testSpec, filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("probe of a missing path = %v, want not-exist", err)
	}
	if err := l.probe(testSpec, t.TempDir()); err != nil {
		t.Errorf("probe of a directory = %v", err)
	}
}
