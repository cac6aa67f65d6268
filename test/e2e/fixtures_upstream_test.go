//go:build e2e

package e2e

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// The upstream Kubernetes e2e suite's subPath tests (k8s.io/kubernetes test/e2e at
// harness.KubernetesVersion, built by test/tools/install.sh), run by TestUpstreamSubPath.
// upstreamFocus selects, by the specs' full text:
//   - the subPath test suite (storage/testsuites/subpath.go) over the in-tree drivers
//     hostPath, hostPathSymlink, emptydir and local (every local volume type; each test
//     pattern the driver supports: inline volumes, pre-provisioned PVs);
//   - the atomic-writer subPath tests (storage/subpath.go: configMap, secret, downwardAPI,
//     projected, and a container restart after a configMap update);
//   - the subPath tests of common/storage (hostPath, emptyDir with an FSGroup) and of
//     common/node's variable expansion (subPathExpr).
const upstreamFocus = `\[Driver: (hostPath|hostPathSymlink|emptydir|local)\].* subPath |` +
	`\[sig-storage\] Subpath |` +
	`\[sig-storage\] HostPath should support subPath|` +
	`\[sig-storage\] EmptyDir volumes .*subPath|` +
	`\[sig-node\] Variable Expansion .*subpath`

// upstreamFocusEnv, if set, replaces upstreamFocus: a developer runs a few specs with it (the
// comparison is the same).
const upstreamFocusEnv = "MOUNTKEEPER_UPSTREAM_FOCUS"

// upstreamSkip leaves out the tests that cannot run on this node, each for its reason
// (docs/subpath.md lists them):
//   - [Disruptive]: "should unmount if pod is gracefully/force deleted while kubelet is
//     down" stop and start kubelet on the node over SSH (systemctl); the suite's node has no
//     SSH and kubelet is not a service;
//   - [Feature:Windows]: the ntfs test patterns need a Windows node.
const upstreamSkip = `\[Disruptive\]|\[Feature:Windows\]`

// upstreamProcs is how many ginkgo processes run the specs: they mostly wait for pods, so
// more processes than cores shorten the run (on 2 cores: 29 specs, 847 s of spec time, took
// 2m32s with 12; 138 specs, 4147 s, took 12m19s with 6; the load stayed near 3).
const upstreamProcs = 12

// upstreamMinSpecs is how many specs upstreamFocus selects that the suite does not skip
// itself (docs/subpath.md's count); fewer fail the test. A developer's upstreamFocusEnv lifts it.
const upstreamMinSpecs = 167

// upstreamProcsEnv, if set, replaces upstreamProcs.
const upstreamProcsEnv = "MOUNTKEEPER_UPSTREAM_PROCS"

// upstreamRunTimeout bounds one run of the suite (ginkgo --timeout): a run that hangs is cut
// off, and the specs it did not finish count as not passed.
const upstreamRunTimeout = 25 * time.Minute

// upstreamBinaries are what install.sh builds for this test besides the node's binaries.
var upstreamBinaries = []string{"e2e.test", "ginkgo", "agnhost", "kubectl"}

// checkUpstreamImages checks that the suite's own image list names every image the harness
// builds for it, so a new version with new image tags fails here, not in a pull.
func checkUpstreamImages(t *testing.T, e2eTest string) {
	t.Helper()
	out, err := exec.Command(e2eTest, "--list-images").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --list-images: %v\n%s", e2eTest, err, out)
	}
	listed := strings.Fields(string(out))
	for _, img := range harness.UpstreamImageNames() {
		if !slices.Contains(listed, img) {
			t.Fatalf("the e2e suite does not list %s (its images changed: update harness.Upstream*Image):\n%s", img, out)
		}
	}
}

// upstreamRun is the outcome of one run of the suite: each spec's report by its full name.
type upstreamRun struct {
	label    string
	dir      string
	duration time.Duration
	specs    map[string]specReport
}

// specReport is the part of a ginkgo spec report the test reads.
type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	State                   string
	RunTime                 time.Duration
	Failure                 struct {
		Message  string
		Location struct {
			FileName   string
			LineNumber int
		}
	}
}

func (s specReport) name() string {
	return strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " ")
}

func (s specReport) failure() string {
	if s.Failure.Message == "" {
		return ""
	}
	msg := s.Failure.Message
	if len(msg) > 1500 {
		msg = msg[:1500] + "..."
	}
	return fmt.Sprintf("  at %s:%d: %s", filepath.Base(s.Failure.Location.FileName), s.Failure.Location.LineNumber, msg)
}

// runUpstream runs the selected specs with ginkgo in the node's network and reads the report.
// A failing spec does not fail the test here (the comparison decides); a run that produces
// no report does.
func (n *kubeNode) runUpstream(bin, label string) *upstreamRun {
	t := n.t
	t.Helper()
	run := &upstreamRun{label: label, dir: filepath.Join(n.dir, label)}
	if err := os.MkdirAll(run.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(run.dir, "report.json")
	logPath := filepath.Join(run.dir, "ginkgo.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := n.kube.Command(filepath.Join(bin, "ginkgo"),
		"--procs", cmp.Or(os.Getenv(upstreamProcsEnv), strconv.Itoa(upstreamProcs)),
		"--focus", cmp.Or(os.Getenv(upstreamFocusEnv), upstreamFocus), "--skip", upstreamSkip,
		"--timeout", upstreamRunTimeout.String(),
		"--json-report", filepath.Base(report), "--output-dir", run.dir,
		"--no-color", "--succinct",
		filepath.Join(bin, "e2e.test"), "--",
		"--kubeconfig", n.kube.AdminKubeconfig(),
		"--provider", "skeleton",
		"--kubectl-path", filepath.Join(bin, "kubectl"),
		"--report-dir", run.dir,
		"--dump-logs-on-failure=false",
		"--node-schedulable-timeout", "2m",
		"--system-pods-startup-timeout", "1m")
	cmd.Dir = run.dir
	// e2e.test makes a temporary directory per process while it builds its spec tree (the
	// kubectl kuberc specs, even when the focus leaves them out) and never removes it: kept
	// under the run's directory, it goes with the node's.
	tmp := filepath.Join(run.dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// ginkgo and its e2e.test processes form a group, killed with it if the test dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	runErr := cmd.Start()
	if runErr == nil {
		runErr = cmd.Wait()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // any process of the run left over
	}
	run.duration = time.Since(start)
	if err := cleanupLocalDriver(); err != nil {
		t.Errorf("%s: %v", label, err)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("%s: ginkgo wrote no report (%v, run: %v):\n%s", label, err, runErr, tailFile(logPath, 6000))
	}
	var reports []struct{ SpecReports []specReport }
	if err := json.Unmarshal(data, &reports); err != nil {
		t.Fatalf("%s: read %s: %v", label, report, err)
	}
	run.specs = map[string]specReport{}
	for _, r := range reports {
		for _, s := range r.SpecReports {
			// A spec the focus left out is "skipped" with no reason: not part of the run. One
			// the suite skipped itself (a driver without that test pattern) says why.
			if s.LeafNodeType == "It" && (s.State != "skipped" || s.Failure.Message != "") {
				run.specs[s.name()] = s
			}
		}
	}
	t.Logf("%s: %s in %v (ginkgo: %v; log %s)", label, run.counts(), run.duration.Round(time.Second), runErr, logPath)
	return run
}

func (r *upstreamRun) count(state string) int {
	c := 0
	for _, s := range r.specs {
		if s.State == state {
			c++
		}
	}
	return c
}

func (r *upstreamRun) passed() int { return r.count("passed") }

// counts is "N ran: P passed, F did not (S skipped by the suite)".
func (r *upstreamRun) counts() string {
	skipped := r.count("skipped")
	ran := len(r.specs) - skipped
	return fmt.Sprintf("%d ran: %d passed, %d did not (%d more skipped by the suite itself)", ran, r.passed(), ran-r.passed(), skipped)
}

// notPassed lists the specs that ran and did not pass, with their state and failure; the
// ones that did not pass in base either are marked as such.
func (r *upstreamRun) notPassed(base *upstreamRun) string {
	var lines []string
	for name, s := range r.specs {
		if s.State == "passed" || s.State == "skipped" {
			continue
		}
		mark := ""
		if base != nil && base.specs[name].State != "passed" {
			mark = " (did not pass without mountkeeper either)"
		}
		lines = append(lines, fmt.Sprintf("%s: %s%s\n%s", s.State, name, mark, s.failure()))
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return "(none)"
	}
	return strings.Join(lines, "\n")
}

// compareUpstream returns the specs that passed without mountkeeper and did not pass with
// it (a spec missing from the second run did not pass).
func compareUpstream(without, with *upstreamRun) []string {
	var out []string
	for name, s := range without.specs {
		if s.State == "passed" && with.specs[name].State != "passed" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// localDriverDirs are where the suite's local volume driver keeps its volumes on the node
// (test/e2e/storage/utils/local.go: hostBase /tmp, "local-driver-<uuid>").
const localDriverDirs = "/tmp/local-driver-*"

// cleanupLocalDriver removes what the local volume driver left on the host when a spec
// failed before its own cleanup: mounts below its directories, the loop devices over their
// files, the directories. A passing run leaves nothing, and nothing is there then.
func cleanupLocalDriver() error {
	dirs, err := filepath.Glob(localDriverDirs)
	if err != nil || len(dirs) == 0 {
		return err
	}
	var errs []string
	for _, dir := range dirs {
		if err := harness.UnmountAll(dir); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && strings.HasPrefix(f[1], "/tmp/local-driver-") {
				if out, err := exec.Command("losetup", "-d", f[0]).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Sprintf("losetup -d %s: %v: %s", f[0], err, out))
				}
			}
		}
	}
	for _, dir := range dirs {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cleanup of the local volume driver's leftovers (%d directories): %s", len(dirs), strings.Join(errs, "; "))
	}
	return nil
}
