package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
)

// PreviousRelease is the commit of the agent released before the current one: the agent an
// operator upgrades from.
const PreviousRelease = "a155699"

var commitName = regexp.MustCompile(`^[0-9a-f]{7,40}$`)

// BuildMountkeeperAt builds cmd/mountkeeper as it was at commit, from this repository's own
// history (git archive into a temporary directory, go build as the Makefile does), and caches
// the binary under $MOUNTKEEPER_CACHE/agents/<commit>/ (default /var/cache/mountkeeper-test):
// the first build takes a few seconds warm, later calls none.
func BuildMountkeeperAt(commit string) (string, error) {
	if !commitName.MatchString(commit) {
		return "", fmt.Errorf("build the agent at %q: not a commit name", commit)
	}
	out := filepath.Join(cacheDir(), "agents", commit, "mountkeeper")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	src, err := os.MkdirTemp("", "mk-agent-"+commit+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if b, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %w: %s", commit, err, b)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	build := exec.Command("go", "build", "-o", tmp, "./cmd/mountkeeper")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build ./cmd/mountkeeper at %s: %w: %s", commit, err, b)
	}
	return out, os.Rename(tmp, out) // a concurrent build renames the same bytes
}
