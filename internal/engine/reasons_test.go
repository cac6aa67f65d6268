package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReasonsAreConstants: every WithReason call in the module names one of the Reason
// constants, so that Reasons (which docs/metrics.md is checked against, in package metrics)
// lists every reason label value a refusal can carry.
func TestReasonsAreConstants(t *testing.T) {
	consts := map[string]string{"ReasonMount": ReasonMount, "ReasonNetwork": ReasonNetwork, "ReasonSubPath": ReasonSubPath, "ReasonBudget": ReasonBudget, "ReasonPanic": ReasonPanic}
	calls := 0
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			var fn string
			switch f := call.Fun.(type) {
			case *ast.Ident:
				fn = f.Name
			case *ast.SelectorExpr:
				fn = f.Sel.Name
			}
			if fn != "WithReason" {
				return true
			}
			calls++
			var name string
			switch a := call.Args[0].(type) {
			case *ast.Ident:
				name = a.Name
			case *ast.SelectorExpr:
				name = a.Sel.Name
			}
			if v, ok := consts[name]; !ok || !slices.Contains(Reasons, v) {
				t.Errorf("%s: WithReason(%s, ...): name a Reason constant listed in Reasons", fset.Position(call.Pos()), types(call.Args[0]))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 4 {
		t.Fatalf("found %d WithReason calls in the module, want the 4 or more there are", calls)
	}
	if len(consts) != len(Reasons) {
		t.Errorf("Reasons %v and the constants %v differ", Reasons, consts)
	}
}

func types(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok {
		return b.Value
	}
	return "an expression"
}
