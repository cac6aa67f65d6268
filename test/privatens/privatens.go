// Package privatens lets tests mount without touching the host: they run in a private mount
// namespace, and whatever they mount vanishes with it, even when they fail or crash.
package privatens

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// reexecEnv marks a test binary re-executed by Run. Its value is the parent's mount
// namespace, so the child can make sure it is not mounting in it.
const reexecEnv = "MK_IN_NS"

// Env is set by `make unit` and `make bench`, which run the tests under
// `unshare -m --propagation private`, to the mount namespace they were started from (as
// readlink /proc/self/ns/mnt shows it): then the whole test binary may mount, once it has
// made sure it is not in that namespace.
const Env = "MOUNTKEEPER_PRIVATE_MOUNT_NS"

// Run returns true when the test runs in a private mount namespace and may mount. Otherwise
// it re-runs this test alone in one (unshare -m --propagation private), reports the outcome
// as its own, and returns false: the caller returns at once. It skips without root (see
// testenv.Require).
func Run(t *testing.T) bool {
	t.Helper()
	if parent := os.Getenv(reexecEnv); parent != "" {
		refuseHostNamespace(t, parent)
		return true
	}
	if outer := os.Getenv(Env); outer != "" {
		refuseHostNamespace(t, outer)
		return true
	}
	reexec(t)
	return false
}

// Require skips tb (fails it under testenv.Strict) unless the whole test binary runs in a private mount namespace (Env set),
// as benchmarks must: a benchmark cannot be re-executed alone.
func Require(tb testing.TB) {
	tb.Helper()
	outer := os.Getenv(Env)
	if outer == "" {
		testenv.Skip(tb, "mounts: run as %s=$(readlink /proc/self/ns/mnt) unshare -m --propagation private go test ... (make unit and make bench do)", Env)
	}
	refuseHostNamespace(tb, outer)
}

func refuseHostNamespace(tb testing.TB, host string) {
	tb.Helper()
	if ns, err := os.Readlink("/proc/self/ns/mnt"); err != nil || ns == host {
		tb.Fatalf("this is not a private mount namespace (%s, %v): refusing to mount", ns, err)
	}
}

func reexec(t *testing.T) {
	t.Helper()
	testenv.Require(t, "root", "unshare")
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(unshare, "-m", "--propagation", "private",
		os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), reexecEnv+"="+ns)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a private mount namespace failed: %v\n%s", t.Name(), err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s did not run in the private mount namespace:\n%s", t.Name(), out)
	}
	if testing.Verbose() {
		t.Logf("in a private mount namespace:\n%s", out)
	}
}
