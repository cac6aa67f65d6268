// Package docs checks the project's Markdown documentation against the repository: every
// relative link resolves, and generated blocks (the import graph) are current.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the module root, seen from this package's directory (where go test runs it).
const repoRoot = "../.."

// docFiles are the files whose links are checked: README.md and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no docs/*.md under %s", repoRoot)
	}
	sort.Strings(files)
	return append([]string{filepath.Join(repoRoot, "README.md")}, files...)
}

// TestRelativeLinks fails for a relative link in README.md or docs/*.md whose file does not
// exist, or whose #anchor names no heading of the Markdown file it points at.
func TestRelativeLinks(t *testing.T) {
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(text)) {
			if problem := checkLink(file, l.target); problem != "" {
				t.Errorf("%s:%d: link %q: %s", rel(file), l.line, l.target, problem)
			}
		}
	}
}

// TestEveryDocIsLinkedFromREADME fails for a docs/*.md that README.md does not link: a topic a
// newcomer cannot find from the first page.
func TestEveryDocIsLinkedFromREADME(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, l := range links(string(readme)) {
		path, _, _ := strings.Cut(l.target, "#")
		linked[filepath.Clean(path)] = true
	}
	for _, file := range docFiles(t)[1:] {
		if name := filepath.Join("docs", filepath.Base(file)); !linked[name] {
			t.Errorf("README.md does not link %s", name)
		}
	}
}

func rel(file string) string {
	r, err := filepath.Rel(repoRoot, file)
	if err != nil {
		return file
	}
	return r
}

type link struct {
	target string
	line   int
}

// linkPattern matches an inline Markdown link or image: [text](target) or [text](target "title").
var linkPattern = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// links returns the relative link targets of a Markdown text, outside fenced code blocks and
// inline code spans.
func links(text string) []link {
	var out []link
	for i, line := range markdownLines(text) {
		if line == "" {
			continue
		}
		for _, m := range linkPattern.FindAllStringSubmatch(withoutCodeSpans(line), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			out = append(out, link{target: target, line: i + 1})
		}
	}
	return out
}

// markdownLines is text's lines with those inside fenced code blocks (and the fences) blanked.
func markdownLines(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

var codeSpan = regexp.MustCompile("`[^`]*`")

func withoutCodeSpans(line string) string { return codeSpan.ReplaceAllString(line, "``") }

// checkLink says what is wrong with target, a link in file, or "".
func checkLink(file, target string) string {
	path, anchor, hasAnchor := strings.Cut(target, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		if _, err := os.Stat(dest); err != nil {
			return fmt.Sprintf("%s does not exist", rel(dest))
		}
	}
	if !hasAnchor {
		return ""
	}
	if !strings.HasSuffix(dest, ".md") {
		return fmt.Sprintf("an anchor into %s, which is not Markdown", rel(dest))
	}
	text, err := os.ReadFile(dest)
	if err != nil {
		return err.Error()
	}
	anchors := headingAnchors(string(text))
	if !anchors[anchor] {
		return fmt.Sprintf("%s has no heading with anchor #%s", rel(dest), anchor)
	}
	return ""
}

// headingAnchors is the set of anchors GitHub gives the headings of a Markdown text: the
// heading lower-cased, without punctuation, spaces as hyphens; a repeated one gets -1, -2, ...
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range markdownLines(text) {
		hashes := len(line) - len(strings.TrimLeft(line, "#"))
		if hashes == 0 || hashes > 6 || !strings.HasPrefix(line[hashes:], " ") {
			continue
		}
		a := slug(line[hashes+1:])
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
