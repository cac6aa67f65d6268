package nri

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// reconfiguringMounter is a recordingMounter that takes reloaded configs (Reconfigurer).
type reconfiguringMounter struct {
	*recordingMounter
	got []*configs.Config
}

func (r *reconfiguringMounter) Reconfigure(cfg *configs.Config) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "reconfigure")
	r.got = append(r.got, cfg)
}

// TestReloadReconfiguresTheMounter: a config reload (ReloadConfig, what the file watch and
// SIGHUP call) hands the new config to the running mounter before the eager classes are held,
// with every network setting of the new config: mountTimeout, unmountGrace, probeInterval and
// createBudget as the file says, and a class made eager held at once. A refused reload
// reconfigures nothing.
func TestReloadReconfiguresTheMounter(t *testing.T) {
	dir := t.TempDir()
	config := func(mountTimeout, grace, probe, budget, lazyMode string) string {
		return fmt.Sprintf(`
stateDir: %s
mountTimeout: %s
unmountGrace: %s
probeInterval: %s
createBudget: %s
runtimeClasses:
  nfs:
    mounts:
      - {type: nfs, source: "filer:/export", destination: /data}
  lazy:
    networkMount: %s
    mounts:
      - {type: nfs, source: "filer:/lazy", destination: /data}
`, dir, mountTimeout, grace, probe, budget, lazyMode)
	}
	rec := &reconfiguringMounter{recordingMounter: &recordingMounter{fakeMounter: &fakeMounter{users: map[string]bool{}}}}
	made := 0
	p := NewPlugin(mustConfig(t, config("30s", "30s", "3s", "1500ms", "onDemand")), false, &specmodtest.Host{}, quietLogger(), WithMounter(
		func(*configs.Config) (Mounter, error) { made++; return rec, nil }))
	if _, err := p.Configure(context.Background(), "", "test", "1"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.log(), " "); got != "" || made != 1 {
		t.Fatalf("at start: %q, %d mounters made; want one, made with the config and not reconfigured", got, made)
	}

	if err := p.ReloadConfig([]byte(config("45s", "2m", "10s", "900ms", "eager")), "test"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.log(), " "); got != "reconfigure release:mountkeeper:eager hold:filer:/lazy:mountkeeper:eager" || made != 1 {
		t.Fatalf("after the reload: %q, %d mounters made; want the same mounter reconfigured, then the class made eager held", got, made)
	}
	got := rec.got[0]
	for _, s := range []struct {
		name      string
		got, want time.Duration
	}{
		{"mountTimeout", got.MountTimeout, 45 * time.Second},
		{"unmountGrace", got.UnmountGrace, 2 * time.Minute},
		{"probeInterval", got.ProbeInterval, 10 * time.Second},
		{"createBudget", got.CreateBudget, 900 * time.Millisecond},
	} {
		if s.got != s.want {
			t.Errorf("the mounter was reconfigured with %s %s, want the reloaded %s", s.name, s.got, s.want)
		}
	}

	rec.reset()
	if err := p.ReloadConfig([]byte(config("45s", "2m", "10ms", "900ms", "eager")), "test"); err == nil {
		t.Fatal("a probeInterval below the minimum was accepted")
	}
	if got := rec.log(); len(got) != 0 {
		t.Errorf("a refused reload reached the mounter: %q", got)
	}
}
