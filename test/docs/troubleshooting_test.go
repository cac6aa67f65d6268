package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// troubleshootingDoc quotes real refusal events and log lines, each under comments naming the
// format strings of the code that produce it.
const troubleshootingDoc = "docs/troubleshooting.md"

// formatComment names one format string: the Go file and a Go-quoted part of the string
// literal (unique in that file) that formats the message.
var formatComment = regexp.MustCompile(`^<!-- format: (\S+\.go) ("(?:[^"\\]|\\.)*") -->$`)

// notOursComment marks a quote of another program's message (the runtime's), which no format
// string of this repository produces.
var notOursComment = regexp.MustCompile(`^<!-- not ours: .+ -->$`)

// quotedMessage is a ```text block of the doc and the format strings said to produce it.
type quotedMessage struct {
	line    int
	text    string
	formats []docFormat
	notOurs bool
}

type docFormat struct{ file, anchor string }

// TestTroubleshootingMessages fails when a message docs/troubleshooting.md quotes no longer
// matches the format string that produces it (so the page cannot rot), when a named format
// string is gone or ambiguous, and when a quote names no format string at all.
func TestTroubleshootingMessages(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot, troubleshootingDoc))
	if err != nil {
		t.Fatal(err)
	}
	quotes, err := parseQuotes(string(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(quotes) == 0 {
		t.Fatalf("%s quotes no message", troubleshootingDoc)
	}
	literals := map[string][]string{}
	for _, q := range quotes {
		if len(q.formats) == 0 && !q.notOurs {
			t.Errorf("%s:%d: a quoted message without a <!-- format: file.go \"...\" --> comment (or <!-- not ours: ... -->)", troubleshootingDoc, q.line)
		}
		for _, f := range q.formats {
			if _, ok := literals[f.file]; !ok {
				if literals[f.file], err = stringLiterals(filepath.Join(repoRoot, f.file)); err != nil {
					t.Fatal(err)
				}
			}
			format, err := uniqueLiteral(literals[f.file], f.anchor)
			if err != nil {
				t.Errorf("%s:%d: %s: %v", troubleshootingDoc, q.line, f.file, err)
				continue
			}
			if !formatPattern(format).MatchString(q.text) {
				t.Errorf("%s:%d: the quoted message does not match the format string of %s:\n  format: %q\n  quote:  %s",
					troubleshootingDoc, q.line, f.file, format, q.text)
			}
		}
	}
}

// parseQuotes returns the doc's ```text blocks with the format comments right above each.
func parseQuotes(doc string) ([]quotedMessage, error) {
	var quotes []quotedMessage
	var pending quotedMessage
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if m := formatComment.FindStringSubmatch(l); m != nil {
			anchor, err := strconv.Unquote(m[2])
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %v", i+1, m[2], err)
			}
			pending.formats = append(pending.formats, docFormat{m[1], anchor})
			continue
		}
		if notOursComment.MatchString(l) {
			pending.notOurs = true
			continue
		}
		if strings.HasPrefix(l, "<!-- format:") {
			return nil, fmt.Errorf("line %d: malformed format comment: %s", i+1, l)
		}
		if l != "```text" {
			if l != "" {
				pending = quotedMessage{} // a comment applies to the block right below it
			}
			continue
		}
		q := pending
		q.line = i + 1
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		q.text = strings.Join(body, "\n")
		quotes = append(quotes, q)
		pending = quotedMessage{}
	}
	return quotes, nil
}

// stringLiterals returns the value of every string literal of a Go file.
func stringLiterals(path string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				out = append(out, s)
			}
		}
		return true
	})
	return out, nil
}

// uniqueLiteral returns the one literal holding anchor, or the literal that is anchor itself.
func uniqueLiteral(literals []string, anchor string) (string, error) {
	var found []string
	for _, s := range literals {
		if s == anchor {
			return s, nil
		}
		if strings.Contains(s, anchor) && !contains(found, s) {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no string literal holds %q (the message changed: update the doc's quote and comment)", anchor)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%d string literals hold %q, name a longer part of one: %q", len(found), anchor, found)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// verb is a fmt verb with its flags, width and precision.
var verb = regexp.MustCompile(`%[-+# 0]*(?:\*|[0-9]+)?(?:\.(?:\*|[0-9]+))?[a-zA-Z%]`)

// formatPattern is the regexp of what format can print: its text as it is, each verb any text
// (%% a percent sign). Pure.
func formatPattern(format string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("(?s)")
	last := 0
	for _, loc := range verb.FindAllStringIndex(format, -1) {
		b.WriteString(regexp.QuoteMeta(format[last:loc[0]]))
		if format[loc[0]:loc[1]] == "%%" {
			b.WriteString("%")
		} else {
			b.WriteString(".*?")
		}
		last = loc[1]
	}
	b.WriteString(regexp.QuoteMeta(format[last:]))
	return regexp.MustCompile(b.String())
}

func TestFormatPattern(t *testing.T) {
	for _, c := range []struct {
		format, text string
		match        bool
	}{
		{`source %s does not exist`, `x: source /a b does not exist on the host`, true},
		{`source %s does not exist`, `source /a is missing`, false},
		{`run %q (attempt %d; next in %s)`, `run "a" (attempt 3; next in 1s)`, true},
		{`100%% of %-5.2f (x)`, `100% of 1.00 (x)`, true},
		{`(x)`, `x`, false}, // parentheses are text, not a group
	} {
		if got := formatPattern(c.format).MatchString(c.text); got != c.match {
			t.Errorf("formatPattern(%q) on %q: %v, want %v", c.format, c.text, got, c.match)
		}
	}
}
