package e2e

// No build tag: this file checks the suite's layout in `make unit`, without starting anything.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestScenarioFilesHoldOnlyTests keeps the e2e scenario files readable as a list of scenarios:
// every function they declare is an entry point of go test (Test*, Benchmark*), and whatever
// the scenarios share (fixtures, per-runtime bodies, helpers, methods) lives in a
// fixtures_<concern>_test.go file, where the next scenario finds it.
func TestScenarioFilesHoldOnlyTests(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no *_test.go files in the working directory: the test must run in test/e2e")
	}
	// isEntryPoint reports whether go test runs name with prefix: the prefix alone, or the
	// prefix followed by anything but a lower-case letter. A closure, so that this file holds
	// only a test too.
	isEntryPoint := func(name, prefix string) bool {
		rest, ok := strings.CutPrefix(name, prefix)
		r, _ := utf8.DecodeRuneInString(rest)
		return ok && (rest == "" || !unicode.IsLower(r))
	}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasPrefix(file, "fixtures_") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || (fn.Recv == nil && (isEntryPoint(fn.Name.Name, "Test") || isEntryPoint(fn.Name.Name, "Benchmark"))) {
				continue
			}
			t.Errorf("%s: %s is not a test: scenario files hold only Test* and Benchmark* functions; move it to a fixtures_*_test.go file",
				fset.Position(fn.Pos()), fn.Name.Name)
		}
	}
}
