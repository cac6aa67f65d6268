package nri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/configs/watch"
	"github.com/mountkeeper/mountkeeper/internal/guard"
	"github.com/mountkeeper/mountkeeper/internal/metrics"
	"github.com/mountkeeper/mountkeeper/internal/metrics/metricstest"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// bufferLogger is a logger whose lines the test reads while the plugin's goroutines log.
func bufferLogger() (*logrus.Logger, *logLines) {
	l, hook := logtest.NewNullLogger()
	return l, &logLines{hook}
}

type logLines struct{ hook *logtest.Hook }

func (l *logLines) String() string {
	var b strings.Builder
	for _, e := range l.hook.AllEntries() {
		line, _ := e.String()
		b.WriteString(line)
	}
	return b.String()
}

// createAndAdmit creates container id of a pod of handler and returns what the runtime's guard
// (the hook, mountkeeper-runtime) says of it, reading the key from the state dir its entry
// names.
func createAndAdmit(t *testing.T, p *Plugin, handler, id, entryStateDir string) error {
	t.Helper()
	adj, _, err := p.CreateContainer(context.Background(),
		&api.PodSandbox{Namespace: "ns", Name: "pod", RuntimeHandler: handler}, &api.Container{Id: id, Name: "app"})
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", id, err)
	}
	return guard.Admit(entryStateDir, id, adj.GetAnnotations())
}

// TestEmptyGuardKeyAtStart: a guard key file that a crash left empty is replaced when the
// plugin starts, which logs it, and the class containers it marks then pass the runtime's
// guard, instead of every class container being refused until someone removes the file.
func TestEmptyGuardKeyAtStart(t *testing.T) {
	cfg := mustConfig(t, testConfig)
	if err := os.WriteFile(filepath.Join(cfg.StateDir, guard.KeyFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	log, logs := bufferLogger()
	p := NewPlugin(cfg, true, &specmodtest.Host{}, log)
	if _, err := p.Configure(context.Background(), "", "test", "1"); err != nil {
		t.Fatal(err)
	}
	if err := createAndAdmit(t, p, "fast", "ctr-1", cfg.StateDir); err != nil {
		t.Errorf("a class container after a start with an empty key: %v", err)
	}
	if !strings.Contains(logs.String(), "holds 0 bytes") || !strings.Contains(logs.String(), "replaced it by a new key") {
		t.Errorf("the replacement is not logged:\n%s", logs.String())
	}
}

// TestReloadCannotMoveTheStateDir: a config reload, through the file watch the agent runs,
// that changes stateDir is refused whole (logged naming the key and the restart it needs,
// shown in status and counted as rejected), so the plugin keeps marking class containers with
// the key in the state dir the runtime's guard entries name; a later reload that keeps
// stateDir is applied.
func TestReloadCannotMoveTheStateDir(t *testing.T) {
	old, moved := t.TempDir(), t.TempDir()
	config := func(stateDir, class string) []byte {
		return []byte("stateDir: " + stateDir + "\nruntimeClasses:\n  " + class + ":\n    mounts: [{source: /srv/x, destination: /x}]\n")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	replace := func(content []byte) {
		t.Helper()
		tmp := path + ".new"
		if err := os.WriteFile(tmp, content, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	replace(config(old, "fast"))
	loaded, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Parse(loaded)
	if err != nil {
		t.Fatal(err)
	}
	log, logs := bufferLogger()
	m := metrics.New("test")
	p := NewPlugin(cfg, true, &specmodtest.Host{}, log, WithMetrics(m))
	if _, err := p.Configure(context.Background(), "", "test", "1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		watch.Reload(ctx, path, loaded, func(data []byte) { _ = p.ReloadConfig(data, path) }, log) // as the agent wires it
	}()
	defer func() { cancel(); <-done }()
	waitReload := func(n int) *ReloadResult {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			scrape := metricstest.Get(t, m.Handler())
			reloads := 0.0
			for _, result := range []string{metrics.Applied, metrics.Rejected} {
				reloads += max(0, scrape.Value("mountkeeper_config_reloads_total", map[string]string{"result": result}))
			}
			if reloads >= float64(n) {
				return p.Status().LastReload
			}
		}
		t.Fatalf("reload %d did not come within 20s (hang guard); log:\n%s", n, logs.String())
		return nil
	}

	replace(config(moved, "fast"))
	res := waitReload(1)
	if err := createAndAdmit(t, p, "fast", "ctr-1", old); err != nil {
		t.Errorf("after a reload that moved stateDir, the runtime's guard (entry: %s) refuses a class container: %v", old, err)
	}
	if res.Applied || !strings.Contains(res.Error, `stateDir changed from "`+old+`" to "`+moved+`"`) || !strings.Contains(res.Error, "restart the agent") {
		t.Errorf("status after the reload: %+v, want it refused, naming stateDir and the restart", res)
	}
	if !strings.Contains(logs.String(), "config reload refused") || !strings.Contains(logs.String(), "stateDir changed") {
		t.Errorf("the refusal is not logged:\n%s", logs.String())
	}
	if got := metricstest.Get(t, m.Handler()).Value("mountkeeper_config_reloads_total", map[string]string{"result": metrics.Rejected}); got != 1 {
		t.Errorf("rejected reloads = %v, want 1", got)
	}
	if _, err := os.Stat(filepath.Join(moved, guard.KeyFile)); err == nil {
		t.Errorf("a guard key was made in %s, which no runtime entry names", moved)
	}

	replace(config(old, "slow"))
	if res := waitReload(2); !res.Applied {
		t.Fatalf("a reload that keeps stateDir: %+v, want it applied", res)
	}
	if err := createAndAdmit(t, p, "slow", "ctr-2", old); err != nil {
		t.Errorf("a container of the reloaded class: %v", err)
	}
}
