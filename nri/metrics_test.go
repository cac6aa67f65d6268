package nri

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/internal/metrics"
	"github.com/mountkeeper/mountkeeper/internal/metrics/metricstest"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// TestMetricsAfterDecisions scripts CreateContainer outcomes and reads them back the way
// Prometheus does: scraped over HTTP and parsed with Prometheus' own text parser.
func TestMetricsAfterDecisions(t *testing.T) {
	host := &specmodtest.Host{Fail: map[string]string{}}
	m := metrics.New("test")
	p := NewPlugin(mustConfig(t, testConfig), true, host, quietLogger(), WithMetrics(m))
	create := func(handler, id string) error {
		_, _, err := p.CreateContainer(context.Background(),
			&api.PodSandbox{Namespace: "ns", Name: "pod", RuntimeHandler: handler}, &api.Container{Id: id, Name: "app"})
		return err
	}
	for i, step := range []struct {
		handler string
		fail    bool
	}{{"fast", false}, {"fast", false}, {"", false}, {"made-up", false}, {"fast", true}} {
		host.Fail["/srv/private"] = "host mount point /srv is private"
		if !step.fail {
			delete(host.Fail, "/srv/private")
		}
		err := create(step.handler, string(rune('a'+i)))
		if (err != nil) != step.fail {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if err := p.ReloadConfig([]byte("runtimeClasses: {fast: {mounts: [{source: relative, destination: /x}]}}\n"), "test"); err == nil {
		t.Fatal("an invalid config was applied")
	}

	scrape := metricstest.Get(t, m.Handler())
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"mountkeeper_create_container_decisions_total", map[string]string{"class": "fast", "outcome": "added", "reason": ""}, 2},
		{"mountkeeper_create_container_decisions_total", map[string]string{"class": "default", "outcome": "added", "reason": ""}, 1},
		{"mountkeeper_create_container_decisions_total", map[string]string{"class": "none", "outcome": "no_class", "reason": ""}, 1},
		{"mountkeeper_create_container_decisions_total", map[string]string{"class": "fast", "outcome": "refused", "reason": "mount"}, 1},
		{"mountkeeper_create_container_decision_seconds", nil, 5},
		{"mountkeeper_config_reloads_total", map[string]string{"result": "rejected"}, 1},
		{"mountkeeper_config_last_reload_success", nil, 0},
	} {
		if got := scrape.Value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for name, family := range scrape {
		for _, metric := range family.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetValue() == "made-up" {
					t.Errorf("%s: a handler no class has reached a label: cardinality is not bounded", name)
				}
			}
		}
	}
	if st := p.Status(); st.LastReload == nil || st.LastReload.Applied || !strings.Contains(st.LastReload.Error, "relative") || len(st.Classes) != 2 {
		t.Errorf("status after a refused reload: %+v, want the refusal and the old classes", st)
	}
}

// TestReconnectsCountReconnections: while the runtime is away the plugin tries again and
// again; mountkeeper_runtime_reconnects_total counts the one reconnection, not the attempts,
// and mountkeeper_runtime_connected follows the connection.
func TestReconnectsCountReconnections(t *testing.T) {
	socket := filepath.Join(shortDir(t), "nri.sock")
	rt := startRuntime(t, socket)
	defer func() { rt.Stop() }()
	m := metrics.New("test")
	p := NewPlugin(mustConfig(t, testConfig), true, &specmodtest.Host{}, quietLogger(), WithMetrics(m))
	attempts := &countingDialer{}
	cs := runPlugin(t, p, socket)
	cs.countFailures(attempts)
	rt.waitSynced(t)
	if got := scrape(t, m, "mountkeeper_runtime_connected", nil); got != 1 {
		t.Errorf("connected = %v while connected, want 1", got)
	}
	if got := scrape(t, m, "mountkeeper_runtime_reconnects_total", nil); got != 0 {
		t.Errorf("reconnects = %v after the first connection, want 0", got)
	}

	rt.Stop()
	cs.cut()
	// The runtime stays away until the plugin has failed to connect a few times.
	for deadline := time.Now().Add(30 * time.Second); attempts.failed.Load() < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin tried %d times in 30s", attempts.failed.Load())
		}
	}
	if got := scrape(t, m, "mountkeeper_runtime_connected", nil); got != 0 {
		t.Errorf("connected = %v while the runtime is away, want 0", got)
	}
	rt = startRuntime(t, socket)
	rt.waitSynced(t)
	if got := scrape(t, m, "mountkeeper_runtime_reconnects_total", nil); got != 1 {
		t.Errorf("reconnects = %v after one reconnection (and %d failed attempts), want 1", got, attempts.failed.Load())
	}
	if got := scrape(t, m, "mountkeeper_runtime_connected", nil); got != 1 {
		t.Errorf("connected = %v after the reconnection, want 1", got)
	}
}

// countingDialer counts the plugin's failed connection attempts.
type countingDialer struct{ failed atomic.Int64 }

// scrape reads one sample of m over HTTP: the counter's or gauge's value, -1 when there is
// no such sample.
func scrape(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	return metricstest.Get(t, m.Handler()).Value(name, labels)
}
