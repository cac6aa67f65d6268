// Package testenv is the one place a test says what it needs from the machine. On a developer's
// laptop a missing dependency skips the test with the reason; with MOUNTKEEPER_REQUIRE_ALL=1
// (set by .ci/run) the same absence fails the test, so CI can never pass by skipping.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireAllEnv, set to 1, turns every missing dependency into a test failure.
const RequireAllEnv = "MOUNTKEEPER_REQUIRE_ALL"

// Strict says whether missing dependencies fail tests instead of skipping them.
func Strict() bool { return os.Getenv(RequireAllEnv) == "1" }

// Skip skips tb with the reason, or fails it when Strict: use it for every absence of
// something the machine should have. It never returns.
func Skip(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if Strict() {
		tb.Fatalf("%s=1 and a dependency is missing: %s", RequireAllEnv, msg)
	}
	tb.Skip(msg)
}

// checks maps each name Require accepts to the check that says why it is missing ("" = present).
var checks = map[string]func() string{
	"root": func() string {
		if os.Geteuid() != 0 {
			return "needs root"
		}
		return ""
	},
	"fuse": func() string {
		if _, err := os.Stat("/dev/fuse"); err != nil {
			return fmt.Sprintf("no FUSE on this machine: %v", err)
		}
		return ""
	},
}

// Require skips (or, when Strict, fails) tb unless the machine has every named dependency:
// "root", "fuse", an absolute path that must exist (e.g. harness.RuncBinary()), or the
// name of a program that must be on PATH (e.g. "sshfs", "unshare", "systemd-run").
func Require(tb testing.TB, needs ...string) {
	tb.Helper()
	for _, n := range needs {
		check, ok := checks[n]
		switch {
		case ok:
		case filepath.IsAbs(n):
			check = func() string {
				if _, err := os.Stat(n); err != nil {
					return fmt.Sprintf("%s is missing (test/tools/install.sh installs it): %v", n, err)
				}
				return ""
			}
		default:
			check = func() string {
				if _, err := exec.LookPath(n); err != nil {
					return fmt.Sprintf("%s not found: %v", n, err)
				}
				return ""
			}
		}
		if why := check(); why != "" {
			Skip(tb, "%s", why)
		}
	}
}
