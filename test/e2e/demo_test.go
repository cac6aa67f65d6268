//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// TestDemo runs `make demo`'s program (test/demo) as part of make test, as make demo runs it:
// in a private mount namespace, on the embedded default config, with the binary make built.
// The demo returns an error when a scenario does not show what it says (a propagation, the
// subPath race with and without mountkeeper, the sshfs class kept and healed), so its exit
// status is the check; the lines it prints are logged.
func TestDemo(t *testing.T) {
	dir := harness.WorkDir(t, "mk-demo-")
	demo := filepath.Join(dir, "demo")
	if out, err := exec.Command("go", "build", "-o", demo, "../demo").CombinedOutput(); err != nil {
		t.Fatalf("go build ./test/demo: %v\n%s", err, out)
	}
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-m", "--propagation", "private", demo)
	cmd.Env = append(os.Environ(), privatens.Env+"="+hostNS)
	out, err := cmd.CombinedOutput()
	t.Logf("make demo's program:\n%s", out)
	if err != nil {
		t.Fatalf("the demo failed: %v", err)
	}
	// Its last step: every scenario before it ran.
	if !strings.Contains(string(out), "removing both containers: the mount goes after") {
		t.Errorf("the demo's output does not reach its last step")
	}
}
