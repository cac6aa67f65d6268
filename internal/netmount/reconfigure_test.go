package netmount

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// reloadConfig is a mountkeeper config with every setting the Manager takes from it.
func reloadConfig(t *testing.T, stateDir, class, propagation string, mountTimeout, grace, probe, budget time.Duration) Config {
	t.Helper()
	cfg, err := configs.Parse(fmt.Appendf(nil, `
stateDir: %s
mountTimeout: %s
unmountGrace: %s
probeInterval: %s
createBudget: %s
pluginRequestTimeout: 60s
runtimeClasses:
  %s:
    mounts:
      - {type: nfs, source: "filer:/a", destination: /a, propagation: %s}
      - {type: nfs, source: "filer:/b", destination: /b, propagation: %s}
      - {type: nfs, source: "filer:/c", destination: /c, propagation: %s}
`, stateDir, mountTimeout, grace, probe, budget, class, propagation, propagation, propagation))
	if err != nil {
		t.Fatal(err)
	}
	return ConfigFrom(cfg, nil)
}

// TestReconfigureAppliesEverySetting: a reload (ConfigFrom of the new config, Reconfigure)
// changes every setting the Manager takes from a config, and each takes effect in the running
// Manager: the next mount attempt gets the new mountTimeout; a mount waiting out the old
// unmountGrace (an hour) goes after the new one; the prober, off before, finds a dead mount at
// the new probeInterval and replaces it with an attempt bounded by the new mountTimeout;
// Acquire waits the new createBudget's share; a mount released after the reload waits the new
// grace; Status names the new class mounts; a new
// stateDir is refused with a warning and the mounts stay where they are.
func TestReconfigureAppliesEverySetting(t *testing.T) {
	fake := newFakeSystem()
	sys := healingFake{fakeSystem: fake}
	dir, otherDir := t.TempDir(), t.TempDir()
	before := reloadConfig(t, dir, "old", "rslave", 30*time.Second, time.Hour, time.Hour, 30*time.Second)
	after := reloadConfig(t, otherDir, "new", "rshared", 45*time.Second, 50*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond)
	log, hook := logtest.NewNullLogger()
	before.Log, before.RetryBackoff, before.lockWait = log, 10*time.Millisecond, time.Second
	m, err := newManager(before, sys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	a, b, c := before.Wanted[0], before.Wanted[1], before.Wanted[2]

	// Under the config before: a mounted, used by ctr-a and released (an hour's grace);
	// b mounted and used by ctr-b (probed every hour: not yet).
	for _, u := range []struct {
		s    netspec.Spec
		user string
	}{{a, "ctr-a"}, {b, "ctr-b"}} {
		if _, err := acquireEventually(t, m, 5*time.Second, u.s, u.user); err != nil {
			t.Fatal(err)
		}
	}
	m.Release("ctr-a")
	fake.mu.Lock()
	if !slices.Equal(fake.timeouts, []time.Duration{30 * time.Second, 30 * time.Second}) {
		t.Errorf("mount timeouts before the reload: %v, want 30s twice", fake.timeouts)
	}
	fake.probeErr[m.mountsDir+"/"+b.Key()] = syscall.ENOTCONN // b dies; the hourly prober cannot tell yet
	fake.mu.Unlock()
	release := fake.holdMounts() // c's first attempt will hang

	m.Reconfigure(after)

	// unmountGrace: a goes after the new 50ms, not the old hour.
	eventually(t, "a unmounted after the new grace", func() bool { return !fake.isMountedNow(m.mountsDir + "/" + a.Key()) })
	// probeInterval: b is found dead within the new interval, and its replacement attempts are
	// bounded by the new mountTimeout.
	eventually(t, "b found dead by the prober", func() bool { return m.Totals().Deaths == 1 })
	eventually(t, "a heal attempt of b", func() bool {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return len(fake.timeouts) > 2
	})
	// createBudget: Acquire waits 100ms (a third of 300ms) for c's first attempt, not 10s:
	// within its 3s it answers with the hint given once FirstWait has passed.
	_, err = acquire(t, m, 3*time.Second, c, "ctr-c")
	if err == nil || !strings.Contains(err.Error(), "has not answered yet") {
		t.Errorf("Acquire of a hanging first attempt: %v; want the answer given after the new FirstWait", err)
	}
	close(release)
	// unmountGrace again: a mount released after the reload waits the new grace too.
	if _, err := acquireEventually(t, m, 5*time.Second, c, "ctr-c"); err != nil {
		t.Fatal(err)
	}
	m.Release("ctr-c")
	eventually(t, "c unmounted after the new grace", func() bool { return !fake.isMountedNow(m.mountsDir + "/" + c.Key()) })
	fake.mu.Lock()
	for i, got := range fake.timeouts[2:] {
		if got != 45*time.Second {
			t.Errorf("mount attempt %d after the reload: timeout %s, want the new 45s", i+3, got)
		}
	}
	fake.mu.Unlock()
	// Uses: Status names the new class mounts.
	for _, st := range m.Status() {
		if !slices.Equal(st.Classes, []string{"new (rshared)"}) {
			t.Errorf("status of %s after the reload: classes %q, want [new (rshared)]", st.Spec, st.Classes)
		}
	}
	// stateDir: not moved, and the log says so.
	if resolved, _ := filepath.EvalSymlinks(dir); m.mountsDir != filepath.Join(resolved, "mounts") {
		t.Errorf("mounts moved to %s", m.mountsDir)
	}
	warned := false
	for _, e := range hook.AllEntries() {
		warned = warned || strings.Contains(e.Message, "stay in "+dir+" until the agent restarts")
	}
	if !warned {
		t.Error("no warning that the new stateDir takes effect at the next start")
	}
}
