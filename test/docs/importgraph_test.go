package docs

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

var update = flag.Bool("update", false, "rewrite the generated blocks of the docs instead of comparing them")

// The import graph block of docs/architecture.md lies between these lines.
const (
	graphBegin = "<!-- importgraph:begin -->"
	graphEnd   = "<!-- importgraph:end -->"
)

// TestImportGraph regenerates the import graph of docs/architecture.md from `go list` and fails
// with a diff when the file's block differs: a hand-kept graph goes stale with the next move.
func TestImportGraph(t *testing.T) {
	goTool := goBinary(t)
	out, err := goList(goTool, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderrOf(err))
	}
	module, err := goList(goTool, "-m", "-f", "{{.Path}}")
	if err != nil {
		t.Fatalf("go list -m: %v\n%s", err, stderrOf(err))
	}
	block := graphBlock(parseGoList(string(out), strings.TrimSpace(string(module))))

	path := filepath.Join(repoRoot, "docs", "architecture.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	current, replaced, err := replaceBetween(string(doc), graphBegin, graphEnd, block)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if current == block {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(replaced), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the import graph of %s", path)
		return
	}
	t.Errorf("the import graph in %s is stale (- in the file, + from go list); rewrite it with\n"+
		"  go test ./test/docs/ -run TestImportGraph -update\n%s", rel(path), testsupport.LineDiff(current, block))
}

// goBinary is the go command on PATH: `go test` puts its own GOROOT/bin first there.
func goBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		testenv.Skip(t, "no go command to list the packages: %v", err)
	}
	return p
}

// goList runs `go list args...` at the root of the module.
func goList(goTool string, args ...string) ([]byte, error) {
	cmd := exec.Command(goTool, append([]string{"list"}, args...)...)
	cmd.Dir = repoRoot
	return cmd.Output()
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}

// parseGoList reads `go list -f '{{.ImportPath}} {{join .Imports " "}}'` lines and returns each
// package of module (without the module prefix) with the module's packages it imports. Packages
// under test/ are left out: they are the tests' own tools, not the product.
func parseGoList(out, module string) map[string][]string {
	local := func(p string) (string, bool) {
		if p == module {
			return ".", true
		}
		rest, ok := strings.CutPrefix(p, module+"/")
		return rest, ok
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, ok := local(fields[0])
		if !ok || pkg == "test" || strings.HasPrefix(pkg, "test/") {
			continue
		}
		imports := []string{}
		for _, imp := range fields[1:] {
			if l, ok := local(imp); ok {
				imports = append(imports, l)
			}
		}
		sort.Strings(imports)
		graph[pkg] = imports
	}
	return graph
}

// graphWidth is where a package's import list wraps.
const graphWidth = 96

// graphBlock formats graph as the fenced block of the doc: one package per line (wrapped at
// graphWidth), then the packages that import nothing of the module's on one list.
func graphBlock(graph map[string][]string) string {
	var pkgs, leaves []string
	width := 0
	for p, imps := range graph {
		if len(imps) == 0 {
			leaves = append(leaves, p)
			continue
		}
		pkgs = append(pkgs, p)
		width = max(width, len(p))
	}
	sort.Strings(pkgs)
	sort.Strings(leaves)
	var b strings.Builder
	b.WriteString("```\n")
	for _, p := range pkgs {
		writeWrapped(&b, fmt.Sprintf("%-*s -> ", width, p), graph[p])
	}
	if len(leaves) > 0 {
		writeWrapped(&b, "import nothing of mountkeeper's: ", leaves)
	}
	b.WriteString("```\n")
	return b.String()
}

func writeWrapped(b *strings.Builder, prefix string, words []string) {
	line := prefix
	indent := strings.Repeat(" ", len(prefix))
	fresh := true
	for _, w := range words {
		if !fresh && len(line)+1+len(w) > graphWidth {
			b.WriteString(line + "\n")
			line, fresh = indent, true
		}
		if !fresh {
			line += " "
		}
		line += w
		fresh = false
	}
	b.WriteString(line + "\n")
}

// replaceBetween returns what doc holds between the lines begin and end, and doc with that
// replaced by block.
func replaceBetween(doc, begin, end, block string) (current, replaced string, err error) {
	i := strings.Index(doc, begin+"\n")
	if i < 0 {
		return "", "", fmt.Errorf("no line %q", begin)
	}
	start := i + len(begin) + 1
	j := strings.Index(doc[start:], end)
	if j < 0 {
		return "", "", fmt.Errorf("no line %q after %q", end, begin)
	}
	stop := start + j
	return doc[start:stop], doc[:start] + block + doc[stop:], nil
}
