package runtimeconfig

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnifiedDiff: the diff --dry-run shows is the one diff -u prints (when diff is installed),
// and patch-shaped in any case.
func TestUnifiedDiff(t *testing.T) {
	many := func(n int, extra map[int]string) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			if s, ok := extra[i]; ok {
				b.WriteString(s)
			}
			b.WriteString("line " + string(rune('a'+i%26)) + "\n")
		}
		return b.String()
	}
	for _, tc := range []struct{ name, old, new string }{
		{"one line added", "version = 3\n[a]\nx = 1\n", "version = 3\nimports = ['/d']\n[a]\nx = 1\n"},
		{"created", "", "a\nb\n"},
		{"removed", "a\nb\n", ""},
		{"two hunks", many(30, nil), many(30, map[int]string{2: "new 1\n", 25: "new 2\n"})},
		{"no newline at the end", "a\nb", "a\nc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := UnifiedDiff("old", "new", []byte(tc.old), []byte(tc.new))
			if !strings.HasPrefix(got, "--- old\n+++ new\n@@ ") {
				t.Fatalf("not a unified diff:\n%s", got)
			}
			diff, err := exec.LookPath("diff")
			if err != nil {
				return
			}
			dir := t.TempDir()
			a, b := filepath.Join(dir, "old"), filepath.Join(dir, "new")
			os.WriteFile(a, []byte(tc.old), 0o644)
			os.WriteFile(b, []byte(tc.new), 0o644)
			out, _ := exec.Command(diff, "-u", "--label", "old", "--label", "new", a, b).Output()
			if string(out) != got {
				t.Errorf("UnifiedDiff:\n%s\ndiff -u:\n%s", got, out)
			}
		})
	}
	if got := UnifiedDiff("a", "b", []byte("x\n"), []byte("x\n")); got != "" {
		t.Errorf("equal texts: %q", got)
	}
}
