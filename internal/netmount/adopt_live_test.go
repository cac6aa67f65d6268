package netmount

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// TestSSHFSMountWithoutState is the fault of an agent killed between its mount and its state
// file, on a real sshfs mount: the mount is live, its state file missing. A new agent whose
// config names the spec adopts it (the same mount, the same daemon, its state written
// again); one whose config does not keeps it while a container uses it (HoldSources) and
// releases it, daemon and scope included, once none does: never "left alone" for ever.
func TestSSHFSMountWithoutState(t *testing.T) {
	tmp, sc, ok := inPrivateNamespace(t)
	if !ok {
		return
	}
	const grace = 200 * time.Millisecond
	spec, _ := startSSHFSServer(t, tmp, sc, "no state\n")
	states := filepath.Join(tmp, "state", "state")
	cfg := Config{StateDir: filepath.Join(tmp, "state"), Grace: grace, MountTimeout: 10 * time.Second,
		RetryBackoff: 100 * time.Millisecond, Scoper: sc, Log: testLogger(t), Wanted: []netspec.Spec{spec}}
	scope := filepath.Join(sc.Root, sc.Parent, unitFor(spec.Key()))

	m1, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path, err := acquireEventually(t, m1, 15*time.Second, spec, "ctr-a")
	m1.Close()
	if err != nil {
		t.Fatal(err)
	}
	daemons := daemonsOf(t, path)
	if len(daemons) != 1 {
		t.Fatalf("FUSE daemons of the first mount: %v, want one", daemons)
	}
	loseState := func() {
		if err := os.Remove(statePath(states, spec.Key())); err != nil {
			t.Fatal(err)
		}
	}
	loseState()
	t.Logf("mounted %s (daemon pid %d), state file removed", path, daemons[0])

	t.Run("an agent whose config names it adopts it", func(t *testing.T) {
		m2, err := NewManager(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer m2.Close()
		p, err := acquireEventually(t, m2, 15*time.Second, spec, "ctr-b")
		if err != nil || p != path {
			t.Fatalf("Acquire = %s, %v; want %s", p, err, path)
		}
		if n := len(mountsAt(t, path)); n != 1 {
			t.Errorf("%d mounts at %s, want the one found", n, path)
		}
		if now := daemonsOf(t, path); !slices.Equal(now, daemons) {
			t.Errorf("FUSE daemons %v, want the same %v", now, daemons)
		}
		states, _ := readStates(states)
		if st, ok := states[spec.Key()]; !ok || st.Version != stateVersion {
			t.Errorf("state after the adoption: %+v (present %v), want version %d", st, ok, stateVersion)
		}
	})
	loseState()

	t.Run("an agent whose config does not name it keeps it while used, then releases it", func(t *testing.T) {
		c := cfg
		c.Wanted = nil
		m3, err := NewManager(c)
		if err != nil {
			t.Fatal(err)
		}
		defer m3.Close()
		if n := m3.HoldSources("ctr-c", []string{path}); n != 1 {
			t.Fatalf("HoldSources held %d mounts, want 1", n)
		}
		m3.ReleaseUnused()
		time.Sleep(3 * grace)
		if now := daemonsOf(t, path); len(mountsAt(t, path)) != 1 || !slices.Equal(now, daemons) {
			t.Fatalf("the mount a container uses went: mounts %d, daemons %v", len(mountsAt(t, path)), now)
		}
		m3.Release("ctr-c")
		eventually(t, "the unused mount released", func() bool { return len(mountsAt(t, path)) == 0 })
		eventually(t, "its daemon gone", func() bool { return len(daemonsOf(t, path)) == 0 })
		eventually(t, "its scope removed", func() bool { _, err := os.Stat(scope); return os.IsNotExist(err) })
	})
}

// startSSHFSServer starts an sshd (in sc) exporting tmp/export, which holds hello with
// content, and returns the spec of an sshfs mount of it and sshd's port.
func startSSHFSServer(t *testing.T, tmp string, sc *CgroupScoper, content string) (netspec.Spec, int) {
	t.Helper()
	keys, export := prepareSSHFSExport(t, tmp, content)
	port := freePort(t)
	startSSHD(t, sc, keys, port)
	return sshfsSpec(keys, export, port), port
}

// prepareSSHFSExport makes tmp/keys (sshd's host key, a user key and its authorized_keys) and
// tmp/export holding hello with content.
func prepareSSHFSExport(t *testing.T, tmp, content string) (keys, export string) {
	t.Helper()
	keys, export = filepath.Join(tmp, "keys"), filepath.Join(tmp, "export")
	for _, d := range []string{keys, export} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(export, "hello"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := testsupport.MakeSSHKeys(keys); err != nil {
		t.Fatal(err)
	}
	return keys, export
}

// sshfsSpec is an sshfs mount of export from the sshd on port, with the user key in keys.
func sshfsSpec(keys, export string, port int, extra ...string) netspec.Spec {
	return netspec.Spec{Type: "fuse.sshfs", Source: "root@127.0.0.1:" + export, Options: append([]string{
		"port=" + strconv.Itoa(port), "IdentityFile=" + filepath.Join(keys, "user"), "IdentitiesOnly=yes",
		"StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "BatchMode=yes", "ConnectTimeout=5",
	}, extra...)}
}

// TestSSHFSAdoptsAnEarlierVersionsMount, on a real sshfs mount: a version 0 agent's mount (its
// state file without version or key, its spec without the FUSE default options, so its key
// is not the one this agent gives the same config entry) is adopted for that entry: Acquire
// answers its path, the same daemon serves, no second mount is made, and its state is
// rewritten in this version's format under its old dir. Before that agent starts, a hook
// (hook mode, EnsureMounted) shares the same mount.
func TestSSHFSAdoptsAnEarlierVersionsMount(t *testing.T) {
	tmp, sc, ok := inPrivateNamespace(t)
	if !ok {
		return
	}
	before, _ := startSSHFSServer(t, tmp, sc, "made by an earlier version\n")
	now := before
	now.Options = netspec.WithFUSEDefaults(before.Type, before.Options)
	if now.Key() == before.Key() {
		t.Fatal("the FUSE defaults do not change the key: nothing to migrate")
	}
	states := filepath.Join(tmp, "state", "state")
	cfg := Config{StateDir: filepath.Join(tmp, "state"), MountTimeout: 10 * time.Second, RetryBackoff: 100 * time.Millisecond,
		Scoper: sc, Log: testLogger(t), Wanted: []netspec.Spec{before}}
	m1, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path, err := acquireEventually(t, m1, 15*time.Second, before, "ctr-a")
	m1.Close()
	if err != nil {
		t.Fatal(err)
	}
	// What an agent of state version 0 wrote: no version, no key, the spec as mounted.
	if err := writeState(states, before.Key(), state{Type: before.Type, Source: before.Source, Options: before.Options, HostPath: path}); err != nil {
		t.Fatal(err)
	}
	daemons := daemonsOf(t, path)

	// Hook mode after the upgrade (no plugin): the hook shares the earlier mount too.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	hookPath, err := EnsureMounted(ctx, cfg, now)
	cancel()
	if err != nil || hookPath != path || len(mountsAt(t, HostPath(cfg.StateDir, now))) != 0 {
		t.Fatalf("the hook's EnsureMounted = %s, %v (%d mounts at this version's path); want the earlier mount %s", hookPath, err, len(mountsAt(t, HostPath(cfg.StateDir, now))), path)
	}

	cfg.Wanted = []netspec.Spec{now}
	m2, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	p, err := acquireEventually(t, m2, 15*time.Second, now, "ctr-b")
	if err != nil || p != path {
		t.Fatalf("Acquire of the config entry under this version's key = %s, %v; want the earlier mount %s", p, err, path)
	}
	if n := len(mountsAt(t, path)); n != 1 || len(mountsAt(t, HostPath(cfg.StateDir, now))) != 0 {
		t.Errorf("%d mounts at the earlier path, %d at this version's: want 1, 0", n, len(mountsAt(t, HostPath(cfg.StateDir, now))))
	}
	if got := daemonsOf(t, path); !slices.Equal(got, daemons) || len(got) != 1 {
		t.Errorf("FUSE daemons %v, want the earlier one %v", got, daemons)
	}
	eventually(t, "the state rewritten in this version's format", func() bool {
		all, _ := readStates(states)
		st, ok := all[before.Key()]
		return ok && st.Version == stateVersion && st.Key == now.Key()
	})
	t.Logf("the earlier version's mount %s (daemon pid %v) serves %s", path, daemons, now)
}
