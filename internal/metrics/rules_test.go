package metrics

import (
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/mountkeeper/mountkeeper/internal/guard"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/liveupdate"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// promtoolVersion is the module version of github.com/prometheus/prometheus whose
// cmd/promtool test/tools/install.sh builds (Prometheus 3).
const promtoolVersion = "v0.316.0"

// findPromtool is $MOUNTKEEPER_PROMTOOL, install.sh's build in the test cache, or promtool on
// PATH; "" if none.
func findPromtool() string {
	if p := os.Getenv("MOUNTKEEPER_PROMTOOL"); p != "" {
		return p
	}
	bin := cmp.Or(os.Getenv("MOUNTKEEPER_BIN"), filepath.Join(cmp.Or(os.Getenv("MOUNTKEEPER_CACHE"), "/var/cache/mountkeeper-test"), "bin"))
	if _, err := os.Stat(filepath.Join(bin, "promtool")); err == nil {
		return filepath.Join(bin, "promtool")
	}
	p, _ := exec.LookPath("promtool")
	return p
}

// TestShippedRules checks deploy/prometheusrule.yaml: every metric and label value its
// expressions name is one the agent exports (so a renamed metric cannot leave an alert that
// never fires), `promtool check rules` accepts it, and `promtool test rules` runs
// testdata/prometheusrule_test.yaml: each alert fires on the series that should fire it, and
// not on a healthy node's.
func TestShippedRules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Kind string
		Spec struct {
			Groups []map[string]any `yaml:"groups"`
		}
	}
	if err := yaml.Unmarshal(data, &obj); err != nil || obj.Kind != "PrometheusRule" || len(obj.Spec.Groups) == 0 {
		t.Fatalf("deploy/prometheusrule.yaml: kind %q, %d groups, %v", obj.Kind, len(obj.Spec.Groups), err)
	}
	exported := exportedNames(t)
	nameRe := regexp.MustCompile(`\bmountkeeper_[a-z_]+`)
	matcherRe := regexp.MustCompile(`([a-z_]+)=~?"([^"]*)"`)
	alerts := 0
	for _, g := range obj.Spec.Groups {
		for _, r := range g["rules"].([]any) {
			rule := r.(map[string]any)
			alerts++
			expr := rule["expr"].(string)
			for _, name := range nameRe.FindAllString(expr, -1) {
				if !exported[name] {
					t.Errorf("alert %s: %s is not a metric the agent exports", rule["alert"], name)
					continue
				}
				for _, m := range matcherRe.FindAllStringSubmatch(expr, -1) {
					values, ok := Enums[name][m[1]]
					if !ok {
						continue
					}
					for _, v := range strings.Split(m[2], "|") {
						if !slices.Contains(values, v) {
							t.Errorf("alert %s: %s{%s} never takes the value %q (it takes %q)", rule["alert"], name, m[1], v, values)
						}
					}
				}
			}
		}
	}
	if alerts < 5 {
		t.Fatalf("%d alerts in deploy/prometheusrule.yaml, want the 5 or more it ships", alerts)
	}

	promtool := findPromtool()
	if promtool == "" {
		testenv.Skip(t, "no promtool: test/tools/install.sh builds github.com/prometheus/prometheus/cmd/promtool@%s (or set MOUNTKEEPER_PROMTOOL)", promtoolVersion)
	}
	dir := t.TempDir()
	write := func(name string, v any) string {
		t.Helper()
		out, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := write("full.yaml", map[string]any{"groups": obj.Spec.Groups})
	if out, err := exec.Command(promtool, "check", "rules", full).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules deploy/prometheusrule.yaml: %v\n%s", err, out)
	}
	// promtool test rules compares annotations too; the tests check when alerts fire, so
	// they run on the rules without them.
	for _, g := range obj.Spec.Groups {
		for _, r := range g["rules"].([]any) {
			delete(r.(map[string]any), "annotations")
		}
	}
	write("rules.yaml", map[string]any{"groups": obj.Spec.Groups})
	tests, err := os.ReadFile(filepath.Join("testdata", "prometheusrule_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// exportedNames are the mountkeeper_ metric families an agent exports, every collector
// registered and every vector touched once.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	m := New("test")
	// A stuck call: that family has a series only while a server has one.
	m.Register(NetworkMounts(func() []netmount.MountStatus { return nil }, func() netmount.Totals {
		return netmount.Totals{StuckCalls: map[string]int{"filer:2049": 1}}
	}))
	dir := t.TempDir()
	if err := guard.RecordRefusal(dir, "c", guard.ReasonNoKey); err != nil {
		t.Fatal(err)
	}
	m.Register(GuardRefusals(func() string { return dir }, func(error) {}))
	m.Register(NewSubPathFallbacks(subpath.Reasons).Collector())
	for _, c := range NewLiveSubPaths(liveupdate.UpdateResults, func() (int, int64) { return 0, 0 }).Collectors() {
		m.Register(c)
	}
	m.Decision("c", Added, "", 0)
	m.Reload(true)
	names := map[string]bool{}
	for name := range scrapeAll(t, m) {
		if strings.HasPrefix(name, "mountkeeper_") {
			names[name] = true
		}
	}
	return names
}
