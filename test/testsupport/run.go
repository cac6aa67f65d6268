package testsupport

import (
	"os/exec"
	"strings"
	"testing"
)

// Run runs a command and returns its combined output, failing tb with that output when it
// fails.
func Run(tb testing.TB, name string, args ...string) string {
	tb.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
