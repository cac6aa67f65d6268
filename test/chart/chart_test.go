// Package chart tests the Helm chart in deploy/helm/mountkeeper with a real, pinned helm
// (test/tools/install-helm.sh): lint, rendering against golden files, the plain manifests of
// deploy/ as the chart renders them, and values.schema.json refusing bad values. The schema's
// agreement with the config's Go types is tested in configs (chartschema_test.go).
package chart

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

var update = flag.Bool("update", false, "rewrite the golden files and deploy/*.yaml from the chart")

var (
	repoRoot = func() string {
		_, self, _, _ := runtime.Caller(0)
		return filepath.Join(filepath.Dir(self), "..", "..")
	}()
	deployDir = filepath.Join(repoRoot, "deploy")
	chartDir  = filepath.Join(deployDir, "helm", "mountkeeper")
)

// release and namespace are what docs/install.md installs as, and what deploy/ is rendered
// for.
const (
	release   = "mountkeeper"
	namespace = "mountkeeper"
)

// helmBinary returns the pinned helm that test/tools/install-helm.sh builds into the cache.
func helmBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("MOUNTKEEPER_BIN")
	if bin == "" {
		bin = filepath.Join(os.Getenv("MOUNTKEEPER_CACHE"), "bin")
		if os.Getenv("MOUNTKEEPER_CACHE") == "" {
			bin = "/var/cache/mountkeeper-test/bin"
		}
	}
	helm := filepath.Join(bin, "helm")
	if _, err := os.Stat(helm); err != nil {
		testenv.Skip(t, "no helm at %s: run test/tools/install-helm.sh (make tools): %v", helm, err)
	}
	return helm
}

// helm runs helm with args and returns its stdout, or an error with its stderr.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	// No user's helm config or cache: the same result on every machine.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), errors.New(strings.TrimSpace(stderr.String() + "\n" + err.Error()))
	}
	return stdout.String(), nil
}

// render runs helm template on the chart with the values files, then the --set values.
func render(t *testing.T, valuesFiles []string, set ...string) string {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", namespace}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// templateWith runs helm template on the chart with values (YAML text) and returns its output
// or its error.
func templateWith(t *testing.T, values string) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return helm(t, "template", release, chartDir, "--namespace", namespace, "--values", path)
}

// valuesCases are the golden cases: testdata/NAME.values.yaml rendered into
// testdata/NAME.golden.yaml. The chart's defaults are the plain manifests (TestPlainManifests).
func valuesCases(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.values.yaml: %v", err)
	}
	return files
}

func TestHelmLint(t *testing.T) {
	for _, values := range append([]string{""}, valuesCases(t)...) {
		t.Run(cmpName(values), func(t *testing.T) {
			args := []string{"lint", "--strict", chartDir, "--namespace", namespace}
			if values != "" {
				args = append(args, "--values", values)
			}
			out, err := helm(t, args...)
			if err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint did not pass:\n%s", out)
			}
		})
	}
}

func cmpName(values string) string {
	if values == "" {
		return "defaults"
	}
	return strings.TrimSuffix(filepath.Base(values), ".values.yaml")
}

func TestHelmTemplateGolden(t *testing.T) {
	for _, values := range valuesCases(t) {
		t.Run(cmpName(values), func(t *testing.T) {
			got := render(t, []string{values})
			checkRendered(t, got)
			golden := strings.TrimSuffix(values, ".values.yaml") + ".golden.yaml"
			compareGolden(t, golden, got)
		})
	}
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from what the chart renders (check the change, then go test ./test/chart -update):\n%s", path, testsupport.LineDiff(string(want), got))
	}
}

// objects decodes every YAML document of a rendering.
func objects(t *testing.T, rendered string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	dec := yaml.NewDecoder(strings.NewReader(rendered))
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, rendered)
		}
		if obj != nil {
			objs = append(objs, obj)
		}
	}
}

// checkRendered checks what the chart promises beyond its text: the ConfigMap's config loads
// as the agent loads it, and there is one RuntimeClass per class of that config (except the
// default handler's), whose handler is the class name.
func checkRendered(t *testing.T, rendered string) {
	t.Helper()
	var config *configs.Config
	var runtimeClasses []string
	for _, obj := range objects(t, rendered) {
		switch obj["kind"] {
		case "ConfigMap":
			data, _ := obj["data"].(map[string]any)
			text, _ := data["config.yaml"].(string)
			c, err := configs.Parse([]byte(text))
			if err != nil {
				t.Fatalf("the chart's config does not load: %v\n%s", err, text)
			}
			config = c
		case "RuntimeClass":
			meta, _ := obj["metadata"].(map[string]any)
			if obj["handler"] != meta["name"] {
				t.Errorf("RuntimeClass %v has handler %v, want its name (the class name)", meta["name"], obj["handler"])
			}
			runtimeClasses = append(runtimeClasses, meta["name"].(string))
		}
	}
	if config == nil {
		t.Fatal("no ConfigMap rendered")
	}
	want := slices.DeleteFunc(config.ClassNames(), func(n string) bool { return n == configs.DefaultClass })
	slices.Sort(runtimeClasses)
	if !slices.Equal(runtimeClasses, want) {
		t.Errorf("RuntimeClasses %v, want one per class of the config %v", runtimeClasses, want)
	}
}

// plainHeader starts each file of deploy/ that the chart renders.
const plainHeader = "# Rendered from the Helm chart deploy/helm/mountkeeper with its default values,\n" +
	"# namespace.create=true and the Prometheus Operator objects on (release and namespace\n" +
	"# mountkeeper): edit the chart, then `go test ./test/chart -update`.\n"

// plainSet are the values deploy/ is rendered with beyond the defaults: the namespace, which
// `kubectl apply` cannot create otherwise, and the PodMonitor and PrometheusRule, each in a
// file of its own that an operator without the Prometheus Operator does not apply.
var plainSet = []string{"namespace.create=true", "metrics.podMonitor.enabled=true", "metrics.prometheusRule.enabled=true"}

var sourceLine = regexp.MustCompile(`(?m)^# Source: mountkeeper/templates/([a-z-]+\.yaml)\n`)

// TestPlainManifests keeps deploy/*.yaml equal to the chart rendered with its defaults and
// plainSet: one file per template.
func TestPlainManifests(t *testing.T) {
	rendered := render(t, nil, plainSet...)
	checkRendered(t, rendered)
	files := map[string]string{}
	for _, doc := range strings.Split(rendered, "---\n") {
		m := sourceLine.FindStringSubmatch(doc)
		if m == nil {
			if strings.TrimSpace(doc) != "" {
				t.Fatalf("a rendered document without its template's name:\n%s", doc)
			}
			continue
		}
		body := strings.Replace(doc, m[0], "", 1)
		if files[m[1]] != "" {
			body = "---\n" + body
		}
		files[m[1]] += body
	}
	for _, want := range []string{"namespace.yaml", "configmap.yaml", "runtimeclass.yaml", "daemonset.yaml", "rbac.yaml", "podmonitor.yaml", "prometheusrule.yaml", "uninstall.yaml"} {
		if files[want] == "" {
			t.Errorf("the chart's defaults render no %s", want)
		}
	}
	for name, body := range files {
		compareGolden(t, filepath.Join(deployDir, name), plainHeader+body)
	}
}

// TestSchemaRejects: values.schema.json refuses bad values before anything reaches a cluster,
// naming the value; the same values with the bad one fixed render.
func TestSchemaRejects(t *testing.T) {
	const good = `runtimeClasses:
  - name: shared-data
    mounts:
      - {source: /srv/shared, destination: /shared, propagation: HostToContainer}
`
	for _, tc := range []struct {
		name, values, want string
	}{
		{"good values", good, ""},
		{"a wrong propagation", strings.Replace(good, "HostToContainer", "HostToKontainer", 1), "/runtimeClasses/0/mounts/0/propagation"},
		{"a class name that is not a DNS label", strings.Replace(good, "shared-data", "Shared_Data", 1), "/runtimeClasses/0/name"},
		{"a class name longer than a DNS label", strings.Replace(good, "shared-data", strings.Repeat("a", 64), 1), "/runtimeClasses/0/name"},
		{"a misspelled mount key", strings.Replace(good, "propagation:", "propagaton:", 1), "propagaton"},
		{"a class without mounts", "runtimeClasses:\n  - name: empty\n", "mounts"},
		{"a class without mounts whose subPaths stay kubelet's", "runtimeClasses:\n  - name: empty\n    subPathUpdates: kubelet\n", "mounts"},
		{"a live subPath class needs no mounts", "runtimeClasses:\n  - name: live-config\n    subPathUpdates: live\n", ""},
		{"an unknown subPathUpdates value", "runtimeClasses:\n  - name: live-config\n    subPathUpdates: always\n", "/runtimeClasses/0/subPathUpdates"},
		{"a relative destination", strings.Replace(good, "destination: /shared", "destination: shared", 1), "/runtimeClasses/0/mounts/0/destination"},
		{"a duration without a unit", good + "config: {mountTimeout: \"30\"}\n", "/config/mountTimeout"},
		{"an unknown config key", good + "config: {mountTimeOut: 30s}\n", "mountTimeOut"},
		{"a decimal size suffix (16M is not 16Mi)", good + "config: {subPathCopies: {podBytes: 16M}}\n", "/config/subPathCopies/podBytes"},
		{"an unknown subPathCopies key", good + "config: {subPathCopies: {podBytess: 1Mi}}\n", "podBytess"},
		{"an unknown runtime", good + "runtime: docker\n", "/runtime"},
		{"a plugin index above 99", good + "nri: {socket: /var/run/nri/nri.sock, pluginIndex: 100}\n", "/nri/pluginIndex"},
		{"maxUnavailable neither a count nor a percentage", good + "updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: half}}\n", "/updateStrategy/rollingUpdate/maxUnavailable"},
		{"an unsupported mount type", strings.Replace(good, "propagation:", "type: ext4, propagation:", 1), "/runtimeClasses/0/mounts/0/type"},
		{"a TLS Secret name that is no object name", good + "metrics: {nodeListener: {enabled: true, port: 9659, tls: {secretName: My_Cert}}}\n", "/metrics/nodeListener/tls/secretName"},
		{"a misspelled TLS key", good + "metrics: {nodeListener: {enabled: true, port: 9659, tls: {secret: my-cert}}}\n", "secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := templateWith(t, tc.values)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("good values refused: %v", err)
			case tc.want == "":
				checkRendered(t, out)
			case err == nil:
				t.Fatalf("helm template accepted %s:\n%s", tc.name, tc.values)
			case !strings.Contains(err.Error(), "don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("helm template refused %s, but not by the schema naming %q: %v", tc.name, tc.want, err)
			}
		})
	}
}

// TestTemplateRefuses: what the schema cannot say, the chart's templates refuse with a message
// naming the value: a class listed twice (the second would silently replace the first), and
// a moving tag that IfNotPresent would never roll out, a PodMonitor with nothing to scrape.
func TestTemplateRefuses(t *testing.T) {
	const class = "runtimeClasses:\n  - {name: a, mounts: [{source: /srv/a, destination: /a}]}\n"
	for _, tc := range []struct {
		name, values, want string
	}{
		{"a class listed twice", class + "  - {name: a, mounts: [{source: /srv/b, destination: /b}]}\n", `runtimeClasses: "a" is listed twice`},
		{"latest with IfNotPresent", class + "image: {repository: r/m, tag: latest, pullPolicy: IfNotPresent}\n", "image.tag latest with image.pullPolicy IfNotPresent"},
		{"latest with Always", class + "image: {repository: r/m, tag: latest, pullPolicy: Always}\n", ""},
		{"a PodMonitor without the node listener it scrapes", class + "metrics: {nodeListener: {enabled: false, port: 9659}, podMonitor: {enabled: true}}\n", "metrics.podMonitor.enabled needs metrics.nodeListener.enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := templateWith(t, tc.values)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("helm template: %v, want it refused with %q", err, tc.want)
			}
		})
	}
}

// TestDefaultsWithoutPrometheusOperator: the defaults render the agent's ServiceAccount and
// RBAC for its node listener and its node labels but no PodMonitor or PrometheusRule, whose CRDs a cluster
// without the Prometheus Operator lacks (helm install would fail there). The uninstall's hook
// objects (uninstall.yaml, made only by helm uninstall) are not counted.
func TestDefaultsWithoutPrometheusOperator(t *testing.T) {
	kinds := map[string]int{}
	for _, obj := range objects(t, render(t, nil)) {
		meta, _ := obj["metadata"].(map[string]any)
		if annotations, _ := meta["annotations"].(map[string]any); annotations["helm.sh/hook"] != nil {
			continue
		}
		kinds[obj["kind"].(string)]++
	}
	for kind, want := range map[string]int{"ServiceAccount": 1, "ClusterRole": 3, "ClusterRoleBinding": 2, "PodMonitor": 0, "PrometheusRule": 0, "Secret": 0} {
		if kinds[kind] != want {
			t.Errorf("the defaults render %d %s, want %d (all kinds: %v)", kinds[kind], kind, want, kinds)
		}
	}
}

// chartValuesBlock matches a fenced yaml block of chart values in the docs: runtimeClasses
// as a list (a config's is a map, which test/docs loads).
var chartValuesBlock = regexp.MustCompile("(?ms)^```yaml\n(runtimeClasses:\n\\s+- .*?)^```")

// TestDocValuesExamples renders every chart values example of docs/*.md: what an operator
// copies passes the schema and gives a config the agent loads.
func TestDocValuesExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range chartValuesBlock.FindAllStringSubmatch(string(text), -1) {
			found++
			out, err := templateWith(t, m[1])
			if err != nil {
				t.Errorf("%s: the chart refuses a values example: %v\n%s", filepath.Base(file), err, m[1])
				continue
			}
			checkRendered(t, out)
		}
	}
	if found == 0 {
		t.Error("no chart values example (a yaml block starting with a runtimeClasses list) in docs/*.md; docs/install.md has one")
	}
}

// TestNodeLabelScheduling: each class's RuntimeClass selects the node label the agent's
// node-label container sets (runtime-handler.mountkeeper.io/<class>), besides the class's own
// nodeSelector; the agent may get and patch nodes; without nodeLabels neither.
func TestNodeLabelScheduling(t *testing.T) {
	out := render(t, nil)
	if !strings.Contains(out, "runtime-handler.mountkeeper.io/shared-data: \"true\"") {
		t.Errorf("the default class's RuntimeClass does not select runtime-handler.mountkeeper.io/shared-data:\n%s", out)
	}
	if !strings.Contains(out, "- name: node-label") || !strings.Contains(out, "verbs: [get, patch]") {
		t.Errorf("no node-label container or no node RBAC in the defaults")
	}
	off := render(t, nil, "nodeLabels.enabled=false")
	if strings.Contains(off, "runtime-handler.mountkeeper.io/") || strings.Contains(off, "- name: node-label") || strings.Contains(off, "resources: [nodes]") {
		t.Errorf("nodeLabels.enabled=false still renders the label, its container or its RBAC")
	}
}

// TestOpenShiftSCC: openshift.scc.enabled renders SecurityContextConstraints for the agent's
// ServiceAccount (privileged, hostPID, hostNetwork, no hostPath) and, as a post-delete hook,
// for the uninstall DaemonSet's, which then runs as that ServiceAccount; off by default.
func TestOpenShiftSCC(t *testing.T) {
	if out := render(t, nil); strings.Contains(out, "SecurityContextConstraints") {
		t.Error("the defaults render SecurityContextConstraints, which only OpenShift has")
	}
	var sccs []map[string]any
	var uninstallDS map[string]any
	for _, obj := range objects(t, render(t, nil, "openshift.scc.enabled=true")) {
		switch obj["kind"] {
		case "SecurityContextConstraints":
			sccs = append(sccs, obj)
		case "DaemonSet":
			if strings.HasSuffix(obj["metadata"].(map[string]any)["name"].(string), "-uninstall") {
				uninstallDS = obj
			}
		}
	}
	if len(sccs) != 2 {
		t.Fatalf("openshift.scc.enabled renders %d SecurityContextConstraints, want the agent's and the uninstall's", len(sccs))
	}
	wantUsers := []string{"system:serviceaccount:" + namespace + ":" + release, "system:serviceaccount:" + namespace + ":" + release + "-uninstall"}
	for i, scc := range sccs {
		for _, k := range []string{"allowPrivilegedContainer", "allowHostPID", "allowHostNetwork"} {
			if scc[k] != true {
				t.Errorf("SCC %d: %s is %v, want true", i, k, scc[k])
			}
		}
		if scc["allowHostDirVolumePlugin"] != false {
			t.Errorf("SCC %d allows hostPath volumes, which no pod of the chart uses", i)
		}
		if users := fmt.Sprint(scc["users"]); users != "["+wantUsers[i]+"]" {
			t.Errorf("SCC %d: users %s, want [%s]", i, users, wantUsers[i])
		}
	}
	spec := uninstallDS["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	if spec["serviceAccountName"] != release+"-uninstall" {
		t.Errorf("the uninstall DaemonSet runs as %v, not the ServiceAccount its SCC names", spec["serviceAccountName"])
	}
}
