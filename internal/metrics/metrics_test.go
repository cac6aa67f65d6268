package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/guard"
	"github.com/mountkeeper/mountkeeper/internal/metrics/metricstest"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
)

// scrapeAll reads m over HTTP with Prometheus' own text parser.
func scrapeAll(t *testing.T, m *Metrics) metricstest.Scrape { return metricstest.Get(t, m.Handler()) }

// fakeManager stands for a netmount.Manager: the mounts it holds now and its totals.
type fakeManager struct {
	held   []netmount.MountStatus
	totals netmount.Totals
}

func (f *fakeManager) status() []netmount.MountStatus { return f.held }
func (f *fakeManager) total() netmount.Totals         { return f.totals }

// TestNetworkCountersDoNotDropOnRelease: a mount that died twice and recovered twice is
// released; the deaths and recoveries counters stay (they come from the Manager's Totals,
// which TestSSHFSHeal checks against a real sshfs mount), while the state gauge drops.
func TestNetworkCountersDoNotDropOnRelease(t *testing.T) {
	m := New("test")
	mgr := &fakeManager{
		held:   []netmount.MountStatus{{Key: "a", State: "mounted", Deaths: 2, Recoveries: 2}},
		totals: netmount.Totals{Deaths: 2, Recoveries: 2},
	}
	m.Register(NetworkMounts(mgr.status, mgr.total))
	before := scrapeAll(t, m)
	mgr.held = nil // released and unmounted: the Manager's totals stay
	after := scrapeAll(t, m)
	for _, name := range []string{"mountkeeper_network_mount_deaths_total", "mountkeeper_network_mount_recoveries_total"} {
		if b, a := before.Value(name, nil), after.Value(name, nil); b != 2 || a != b {
			t.Errorf("%s: %v before the release, %v after, want 2 both times", name, b, a)
		}
	}
	if got := after.Value("mountkeeper_network_mounts", map[string]string{"state": "mounted"}); got != 0 {
		t.Errorf("mounted mounts after the release = %v, want 0", got)
	}
}

// TestEscalatedUnmountsAreScraped: the releases of a dead mount that needed umount -f, and of
// those the ones that needed umount -l too (the Manager's Totals, which TestNFSGuestDeadServer
// checks against a stopped nfsd), are reported by how they were escalated.
func TestEscalatedUnmountsAreScraped(t *testing.T) {
	m := New("test")
	mgr := &fakeManager{totals: netmount.Totals{ForcedUnmounts: 3, LazyUnmounts: 1}}
	m.Register(NetworkMounts(mgr.status, mgr.total))
	f := scrapeAll(t, m)
	for how, want := range map[string]float64{"force": 3, "lazy": 1} {
		if got := f.Value("mountkeeper_network_unmounts_escalated_total", map[string]string{"how": how}); got != want {
			t.Errorf("escalated unmounts {how=%s} = %v, want %v", how, got, want)
		}
	}
}

// TestStuckCallsAreScraped: the Manager's stuck probes by server (Totals.StuckCalls, which
// TestNFSGuestDeadServer checks against the threads in D state) are a gauge per server.
func TestStuckCallsAreScraped(t *testing.T) {
	m := New("test")
	mgr := &fakeManager{totals: netmount.Totals{StuckCalls: map[string]int{"filer:2049": 1, "h:22": 2}}}
	m.Register(NetworkMounts(mgr.status, mgr.total))
	f := scrapeAll(t, m)
	for server, want := range mgr.totals.StuckCalls {
		if got := f.Value("mountkeeper_network_stuck_calls", map[string]string{"server": server}); got != float64(want) {
			t.Errorf("stuck calls {server=%s} = %v, want %v", server, got, want)
		}
	}
}

// TestGuardRefusalsAreScraped: refusals the guard recorded in the state dir, by class and
// reason, are what the agent reports.
func TestGuardRefusalsAreScraped(t *testing.T) {
	dir := t.TempDir()
	for _, r := range []guard.Refusal{{Class: "mk-net", Reason: guard.ReasonNotHandled}, {Class: "mk-net", Reason: guard.ReasonNotHandled}, {Class: "default", Reason: guard.ReasonNoKey}} {
		if err := guard.RecordRefusal(dir, r.Class, r.Reason); err != nil {
			t.Fatal(err)
		}
	}
	m := New("test")
	var failures []error
	m.Register(GuardRefusals(func() string { return dir }, func(err error) { failures = append(failures, err) }))
	f := scrapeAll(t, m)
	for _, c := range []struct {
		class, reason string
		want          float64
	}{{"mk-net", guard.ReasonNotHandled, 2}, {"default", guard.ReasonNoKey, 1}, {"mk-net", guard.ReasonNoKey, -1}} {
		if got := f.Value("mountkeeper_guard_refusals_total", map[string]string{"class": c.class, "reason": c.reason}); got != c.want {
			t.Errorf("guard refusals {%s, %s} = %v, want %v", c.class, c.reason, got, c.want)
		}
	}
	if len(failures) != 0 {
		t.Errorf("reading the record failed: %v", failures)
	}
	// No record yet (the guard never refused): no sample and no failure.
	m = New("test")
	m.Register(GuardRefusals(func() string { return filepath.Join(dir, "none") }, func(err error) { failures = append(failures, err) }))
	if got := scrapeAll(t, m).Value("mountkeeper_guard_refusals_total", nil); got != -1 || len(failures) != 0 {
		t.Errorf("without a record: %v, failures %v", got, failures)
	}
}

// TestBuildInfoAndReloadTime: build_info names the version; the last successful reload time
// is the start-up load's, moves on with an applied reload and stays with a rejected one.
func TestBuildInfoAndReloadTime(t *testing.T) {
	start := time.Now()
	m := New("v1.2.3-4-gabcdef")
	f := scrapeAll(t, m)
	if got := f.Value("mountkeeper_build_info", map[string]string{"version": "v1.2.3-4-gabcdef", "goversion": runtime.Version()}); got != 1 {
		t.Errorf("build_info = %v, want 1 with the version", got)
	}
	at := f.Value("mountkeeper_config_last_reload_success_timestamp_seconds", nil)
	if at < float64(start.Unix()) {
		t.Errorf("last reload success at %v, before the start %v", at, start.Unix())
	}
	m.configAt.Set(1000) // as if it were long ago
	m.Reload(false)
	if got := scrapeAll(t, m).Value("mountkeeper_config_last_reload_success_timestamp_seconds", nil); got != 1000 {
		t.Errorf("a rejected reload moved the success time to %v", got)
	}
	m.Reload(true)
	if got := scrapeAll(t, m).Value("mountkeeper_config_last_reload_success_timestamp_seconds", nil); got < float64(start.Unix()) {
		t.Errorf("an applied reload left the success time at %v", got)
	}
}

// TestDocsListEveryLabelValue keeps docs/metrics.md in step with the code: every metric the
// agent exports is in its table, every metric there exists, and each label with a fixed set
// of values lists exactly the values the code produces (Enums).
func TestDocsListEveryLabelValue(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // metric name -> its labels cell
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`mountkeeper_") {
			continue
		}
		for _, name := range regexp.MustCompile("`(mountkeeper_[a-z_]+)`").FindAllStringSubmatch(cells[1], -1) {
			rows[name[1]] = cells[3]
		}
	}
	exported := exportedNames(t)
	for name := range exported {
		if _, ok := rows[name]; !ok {
			t.Errorf("%s is exported but not in docs/metrics.md", name)
		}
	}
	for name := range rows {
		if !exported[name] {
			t.Errorf("docs/metrics.md lists %s, which the agent does not export", name)
		}
	}
	labelRe := regexp.MustCompile("`([a-z_]+)` \\(([^)]*)\\)")
	valueRe := regexp.MustCompile("`([^`]*)`")
	for name, labels := range Enums {
		documented := map[string][]string{}
		for _, l := range labelRe.FindAllStringSubmatch(rows[name], -1) {
			for _, v := range valueRe.FindAllStringSubmatch(l[2], -1) {
				documented[l[1]] = append(documented[l[1]], strings.Trim(v[1], `"`))
			}
		}
		for label, values := range labels {
			got, want := slices.Sorted(slices.Values(documented[label])), slices.Sorted(slices.Values(values))
			if !slices.Equal(got, want) {
				t.Errorf("%s{%s}: docs/metrics.md lists %q, the code produces %q", name, label, got, want)
			}
		}
	}
}
