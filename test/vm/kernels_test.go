//go:build kernels

package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kernelPackages are the packages whose tests depend on the kernel (mounts, idmapped
// mounts, FUSE, mount propagation), compiled once on the host and run in every guest.
var kernelPackages = []string{
	"internal/mounttable",
	"internal/idmap",
	"internal/hostmount",
	"specmod",
	"internal/engine",
	"internal/subpath",
	"internal/subpath/copies",
	"internal/subpath/liveupdate",
	"internal/netmount",
	"configs",
}

// knownFailures are tests left out on kernels older than before, where the product falls
// short today; TestKernels logs each one it leaves out.
var knownFailures = []struct{ before, pkg, test, why string }{
	{"6.1", "internal/subpath/liveupdate", "TestHeldInodesOwnDescriptor",
		"5.10's fdinfo has no ino: line, so which retired copies are held is unknown (the scan keeps them all); only live updates use it, and they are refused below 6.5"},
}

// partial are packages of which only some tests run (run, a -test.run pattern), on some
// kernels: those that take a path no other kernel takes, where the whole package costs minutes
// under TCG. TestKernels logs where each one is left out.
var partial = map[string]struct {
	kernels  []string
	run, why string
}{
	// The heal's mount swap without MOVE_MOUNT_BENEATH (< 6.5) runs for real on 6.1 (5.10
	// takes the same path); 6.12 takes the host's path. The rest of the package mounts sshfs
	// over and over with timing budgets made for the host, about 190 s under TCG.
	"internal/netmount": {kernels: []string{"6.1"}, run: "^(TestSSHFSHeal|TestReplaceDeadReachesSlavesAndKeepsOneMount)$",
		why: "the heal's path without MOVE_MOUNT_BENEATH (< 6.5); the whole package takes about 190 s under TCG"},
	// Only the live-class refusal at load reads the kernel.
	"configs": {kernels: []string{"5.10", "6.1", "6.12"}, run: "^TestLiveClassOnThisKernel$", why: "the load of a live class asks the kernel"},
}

// sourceOnly are tests that read the repository's source, not the kernel: they run in make
// unit, and in a guest only cost time (walking the tree over virtiofs).
var sourceOnly = []struct{ pkg, test string }{
	{"internal/engine", "TestReasonsAreConstants"},
}

// leftOut returns the tests of pkg left out on kernel k, logging why.
func leftOut(t *testing.T, k Kernel, pkg string) []string {
	var tests []string
	for _, s := range sourceOnly {
		if s.pkg == pkg {
			tests = append(tests, s.test)
		}
	}
	for _, f := range knownFailures {
		if f.pkg == pkg && versionLess(k.Name, f.before) {
			t.Logf("left out on %s: %s %s: %s", k.Name, pkg, f.test, f.why)
			tests = append(tests, f.test)
		}
	}
	return tests
}

// versionLess compares kernel series: "5.10" < "6.1" < "6.12".
func versionLess(a, b string) bool {
	var a1, a2, b1, b2 int
	fmt.Sscanf(a, "%d.%d", &a1, &a2)
	fmt.Sscanf(b, "%d.%d", &b1, &b2)
	return a1 < b1 || a1 == b1 && a2 < b2
}

// passEnv is what the guest's tests get from the host's environment.
var passEnv = []string{"MOUNTKEEPER_REQUIRE_ALL", "MOUNTKEEPER_CACHE", "MOUNTKEEPER_BIN"}

// TestKernels runs the unit tests of kernelPackages on each of Debian's kernels (5.10, 6.1,
// 6.12), one guest per kernel, one after the other, and reports each test as a subtest named
// by kernel and package: TestKernels/6.1/internal_mounttable/TestParse. A test that fails in
// the guest fails there; a package binary that fails outside its tests (a panic, its
// timeout) fails the package's subtest. Run one kernel with -run 'TestKernels/^6.1$'.
func TestKernels(t *testing.T) {
	kernels := Kernels(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := TempDir(t)
	began := time.Now()
	for _, pkg := range kernelPackages {
		cmd := exec.Command("go", "test", "-c", "-o", filepath.Join(bin, binName(pkg)), "./"+pkg)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go test -c ./%s: %v\n%s", pkg, err, out)
		}
	}
	t.Logf("compiled %d test binaries in %v", len(kernelPackages), time.Since(began))
	for _, k := range kernels {
		t.Run(k.Name, func(t *testing.T) {
			res, err := Run(context.Background(), k, Options{
				Argv:    []string{"sh", "-c", guestScript(t, k, root, bin)},
				Dir:     root,
				Env:     append(guestEnv(), "MOUNTKEEPER_VM_KERNEL="+k.Name), // tests shorten their heaviest loops under TCG
				Timeout: 15 * time.Minute,
			})
			logRun(t, k, res)
			if err != nil {
				t.Fatalf("%v\nconsole:\n%s\noutput:\n%s", err, res.Console, res.Output)
			}
			for _, p := range splitPackages(string(res.Output)) {
				t.Run(binName(p.name), func(t *testing.T) {
					t.Logf("%s on %s: %s", p.name, k.Name, p.took)
					reportPackage(t, k, p)
				})
			}
		})
	}
}

// binName names a package's test binary and subtest: internal/mounttable -> internal_mounttable.
func binName(pkg string) string { return strings.ReplaceAll(pkg, "/", "_") }

// logRun logs how long a guest of k ran and whether its first boot locked up (Run booted it
// again then).
func logRun(t *testing.T, k Kernel, res Result) {
	t.Helper()
	t.Logf("kernel %s (%s): %v", k.Name, k.Release, res.Elapsed)
	if res.LockedUp != "" {
		t.Logf("kernel %s: the first boot locked up and the guest was booted again: %s", k.Name, res.LockedUp)
	}
}

func guestEnv() []string {
	var env []string
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

const pkgMarker = "=== mountkeeper-vm package "

// guestScript runs each package's test binary in its directory, as make unit does: in a
// private mount namespace, -test.v so every test's result comes back. A marker line before
// and after each names the package and, after, its exit status.
func guestScript(t *testing.T, k Kernel, root, bin string) string {
	var b strings.Builder
	b.WriteString("ns=$(readlink /proc/self/ns/mnt)\n")
	for _, pkg := range kernelPackages {
		run := ""
		if p, ok := partial[pkg]; ok {
			if !slices.Contains(p.kernels, k.Name) {
				t.Logf("left out on %s: %s (runs on %s only: %s)", k.Name, pkg, strings.Join(p.kernels, ", "), p.why)
				continue
			}
			run = " -test.run=" + shellQuote(p.run)
			t.Logf("on %s only %s of %s: %s", k.Name, p.run, pkg, p.why)
		}
		fmt.Fprintf(&b, "echo '%s%s start'; s=$(date +%%s%%N)\n", pkgMarker, pkg)
		skip := ""
		if tests := leftOut(t, k, pkg); len(tests) > 0 {
			skip = " -test.skip=" + shellQuote("^("+strings.Join(tests, "|")+")$")
		}
		fmt.Fprintf(&b, "cd %s && MOUNTKEEPER_PRIVATE_MOUNT_NS=$ns unshare -m --propagation private %s -test.v -test.count=1 -test.timeout=8m%s%s 2>&1\n",
			shellQuote(filepath.Join(root, pkg)), shellQuote(filepath.Join(bin, binName(pkg))), run, skip)
		fmt.Fprintf(&b, "echo \"%s%s exit $? $(( ($(date +%%s%%N) - s) / 1000000 ))ms\"\n", pkgMarker, pkg)
	}
	return b.String()
}

// guestPackage is one package's part of the guest's output.
type guestPackage struct {
	name   string
	output string
	exit   string // "" when the guest never got to the end of the package
	took   string // its time in the guest
}

func splitPackages(out string) []guestPackage {
	var pkgs []guestPackage
	for _, line := range strings.SplitAfter(out, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), pkgMarker); ok {
			name, what, _ := strings.Cut(rest, " ")
			if what == "start" {
				pkgs = append(pkgs, guestPackage{name: name})
			} else if len(pkgs) > 0 {
				f := strings.Fields(what) // exit STATUS TIME
				if len(f) == 3 {
					pkgs[len(pkgs)-1].exit, pkgs[len(pkgs)-1].took = f[1], f[2]
				}
			}
			continue
		}
		if len(pkgs) > 0 {
			pkgs[len(pkgs)-1].output += line
		}
	}
	return pkgs
}

// guestTest is one test (or subtest) as test2json read it from the guest's output.
type guestTest struct {
	name     string // the last element of its name
	action   string // pass, fail or skip; "" when it never ended
	elapsed  float64
	output   strings.Builder
	children []*guestTest
}

// reportPackage replays a package's results from the guest as subtests of t.
func reportPackage(t *testing.T, k Kernel, p guestPackage) {
	cmd := exec.Command("go", "tool", "test2json", "-p", p.name)
	cmd.Stdin = strings.NewReader(p.output)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go tool test2json: %v", err)
	}
	top, err := parseEvents(out)
	if err != nil {
		t.Fatal(err)
	}
	failed := false
	for _, g := range top {
		failed = replay(t, k, g) || failed
	}
	if p.exit != "0" && !failed {
		t.Errorf("on kernel %s (%s) the test binary of %s ended with exit status %q outside its tests:\n%s",
			k.Name, k.Release, p.name, p.exit, tail(p.output, 60))
	}
	if len(top) == 0 && p.exit == "0" {
		t.Errorf("no test of %s ran on kernel %s:\n%s", p.name, k.Name, tail(p.output, 60))
	}
}

type event struct {
	Action, Test, Output string
}

// resultTime is the time on a test's result line: "--- PASS: TestX (1.23s)", indented for a
// subtest.
var resultTime = regexp.MustCompile(`^\s*--- (?:PASS|FAIL|SKIP): \S+ \(([0-9.]+)s\)`)

func parseEvents(out []byte) ([]*guestTest, error) {
	byName := map[string]*guestTest{}
	var top []*guestTest
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("test2json: %v: %s", err, line)
		}
		if e.Test == "" {
			continue
		}
		g := byName[e.Test]
		if g == nil {
			parent, last := "", e.Test
			if i := strings.LastIndex(e.Test, "/"); i >= 0 {
				parent, last = e.Test[:i], e.Test[i+1:]
			}
			g = &guestTest{name: last}
			byName[e.Test] = g
			if p := byName[parent]; p != nil {
				p.children = append(p.children, g)
			} else {
				g.name = e.Test
				top = append(top, g)
			}
		}
		switch e.Action {
		case "output":
			g.output.WriteString(e.Output)
			if m := resultTime.FindStringSubmatch(e.Output); m != nil {
				g.elapsed, _ = strconv.ParseFloat(m[1], 64)
			}
		case "pass", "fail", "skip":
			g.action = e.Action
		}
	}
	return top, nil
}

// replay reports g and its subtests as subtests of t, and says whether g failed.
func replay(t *testing.T, k Kernel, g *guestTest) bool {
	t.Helper()
	return !t.Run(g.name, func(t *testing.T) {
		for _, c := range g.children {
			replay(t, k, c)
		}
		switch g.action {
		case "pass":
			t.Logf("passed on kernel %s in %.2fs", k.Name, g.elapsed)
		case "skip":
			t.Skipf("skipped on kernel %s (%s):\n%s", k.Name, k.Release, g.output.String())
		case "fail":
			t.Errorf("failed on kernel %s (%s):\n%s", k.Name, k.Release, g.output.String())
		default:
			t.Errorf("never ended on kernel %s (%s):\n%s", k.Name, k.Release, g.output.String())
		}
	})
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// TestGuestOutput: the guest's output is split by package, with each package's exit status
// and time, and test2json's events become a tree of tests with their results and times.
func TestGuestOutput(t *testing.T) {
	out := pkgMarker + "internal/a start\n=== RUN   TestA\n=== RUN   TestA/sub\n    x_test.go:1: boom\n" +
		"--- FAIL: TestA (1.50s)\n    --- FAIL: TestA/sub (0.25s)\n=== RUN   TestB\n--- PASS: TestB (0.01s)\nFAIL\n" +
		pkgMarker + "internal/a exit 1 1700ms\n" + pkgMarker + "specmod start\npanic: hung\n"
	pkgs := splitPackages(out)
	if len(pkgs) != 2 || pkgs[0].name != "internal/a" || pkgs[0].exit != "1" || pkgs[0].took != "1700ms" ||
		pkgs[1].name != "specmod" || pkgs[1].exit != "" || pkgs[1].output != "panic: hung\n" {
		t.Fatalf("packages: %+v", pkgs)
	}
	cmd := exec.Command("go", "tool", "test2json", "-p", "internal/a")
	cmd.Stdin = strings.NewReader(pkgs[0].output)
	events, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	top, err := parseEvents(events)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 2 || top[0].name != "TestA" || top[0].action != "fail" || top[0].elapsed != 1.5 ||
		len(top[0].children) != 1 || top[0].children[0].name != "sub" || top[0].children[0].action != "fail" ||
		top[0].children[0].elapsed != 0.25 || !strings.Contains(top[0].children[0].output.String(), "boom") ||
		top[1].name != "TestB" || top[1].action != "pass" {
		t.Fatalf("tests: %+v", top)
	}
}
