package netmount

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// recordingSystem is a fakeSystem that keeps the specs mount gets: what reaches the helper's
// command line.
type recordingSystem struct {
	*fakeSystem
	mu    sync.Mutex
	specs []netspec.Spec
}

func (r *recordingSystem) mount(ctx context.Context, s netspec.Spec, unit, target string, timeout time.Duration) error {
	r.mu.Lock()
	r.specs = append(r.specs, s)
	r.mu.Unlock()
	return r.fakeSystem.mount(ctx, s, unit, target, timeout)
}

// No secret reaches a command line: CIFS gets its password in a 0600
// credentials= file, Ceph its key in a secretfile=; the files live under the state directory
// until the unmount; the state file holds no secret either.
func TestSecretsReachHelpersInFilesOnly(t *testing.T) {
	tests := []struct {
		name       string
		spec       netspec.Spec
		option     string // the option that names the file
		file       string // what the file holds
		keptOption string // a non-secret option that stays on the command line
	}{
		{name: "cifs password", spec: netspec.Spec{Type: "cifs", Source: "//srv/share", Options: []string{"username=bob", "password=hunter2", "vers=3.0"}},
			option: "credentials", file: "password=hunter2\n", keptOption: "username=bob"},
		{name: "cifs user%password", spec: netspec.Spec{Type: "cifs", Source: "//srv/share", Options: []string{"user=bob%hunter2"}},
			option: "credentials", file: "username=bob\npassword=hunter2\n", keptOption: "user=bob"},
		{name: "ceph secret", spec: netspec.Spec{Type: "ceph", Source: "mon1:/vol", Options: []string{"name=admin", "secret=hunter2"}},
			option: "secretfile", file: "hunter2\n", keptOption: "name=admin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sys := &recordingSystem{fakeSystem: newFakeSystem()}
			c := Config{StateDir: dir, Grace: 20 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, Log: quietLog()}
			m, err := newManager(c, sys)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			if _, err := acquire(t, m, 5*time.Second, tt.spec, "ctr"); err != nil {
				t.Fatal(err)
			}
			sys.mu.Lock()
			got := sys.specs
			sys.mu.Unlock()
			if len(got) != 1 {
				t.Fatalf("%d mounts, want 1", len(got))
			}
			line := strings.Join(append([]string{got[0].Source}, got[0].Options...), " ")
			if strings.Contains(line, "hunter2") || strings.Contains(got[0].String(), "hunter2") {
				t.Errorf("the helper's command line holds the secret: %q", line)
			}
			if !strings.Contains(line, tt.keptOption) {
				t.Errorf("command line %q lost %s", line, tt.keptOption)
			}
			var path string
			for _, o := range got[0].Options {
				if v, ok := strings.CutPrefix(o, tt.option+"="); ok {
					path = v
				}
			}
			if path == "" {
				t.Fatalf("no %s= option in %q", tt.option, got[0].Options)
			}
			if !strings.HasPrefix(path, dir+"/") {
				t.Errorf("secret file %s is not under the state directory %s", path, dir)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("secret file mode %#o, want 0600", fi.Mode().Perm())
			}
			if di, err := os.Stat(filepath.Dir(path)); err != nil || di.Mode().Perm() != 0o700 {
				t.Errorf("secret file's directory: %v, want mode 0700", err)
			}
			if data, _ := os.ReadFile(path); string(data) != tt.file {
				t.Errorf("secret file holds %q, want %q", data, tt.file)
			}
			data, err := os.ReadFile(statePath(filepath.Join(dir, "state"), tt.spec.Key()))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), "hunter2") {
				t.Errorf("the state file holds the secret:\n%s", data)
			}

			m.Release("ctr")
			eventually(t, "the mount is unmounted", func() bool { _, ok := statusOf(m, tt.spec.Key()); return !ok })
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("secret file left after the unmount: %v", err)
			}
		})
	}
}

// The scope's description and the helper's argv (systemd-run's command line) hold no secret.
func TestSystemdCommandHoldsNoSecret(t *testing.T) {
	s := netspec.Spec{Type: "cifs", Source: "//srv/share", Options: []string{"password=hunter2"}}
	cmdSpec, content, ok := s.WithSecretFile("/var/lib/mountkeeper/secrets/x")
	if !ok || !strings.Contains(string(content), "hunter2") {
		t.Fatalf("WithSecretFile = %v, %q, %v", cmdSpec, content, ok)
	}
	argv := []string{"/bin/mount", "-t", cmdSpec.Type, "-o", strings.Join(cmdSpec.Options, ","), cmdSpec.Source, "/t"}
	cmd := (&SystemdScoper{Run: "/usr/bin/systemd-run"}).Command(Job{Unit: "mount-x", Description: "mountkeeper: " + cmdSpec.String(), Argv: argv})
	if line := strings.Join(cmd, " "); strings.Contains(line, "hunter2") {
		t.Errorf("systemd-run command line holds the secret: %s", line)
	}
}
