package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/configs"
)

// yamlBlock matches a fenced yaml block of a Markdown text.
var yamlBlock = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")

// chartValues matches the Helm chart's values, whose runtimeClasses is a list.
var chartValues = regexp.MustCompile(`(?m)^runtimeClasses:\n\s+- `)

// TestConfigExamples fails when a config shown in README.md or docs/*.md (a yaml block with
// runtimeClasses) is not one mountkeeper accepts: the README's example is what a newcomer
// copies first.
func TestConfigExamples(t *testing.T) {
	found := 0
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range yamlBlock.FindAllStringSubmatch(string(text), -1) {
			if !strings.Contains(m[1], "\nruntimeClasses:") && !strings.HasPrefix(m[1], "runtimeClasses:") {
				continue
			}
			if chartValues.MatchString(m[1]) {
				continue // Helm chart values (a list of classes): test/chart renders those
			}
			found++
			if _, err := configs.Parse([]byte(m[1])); err != nil {
				t.Errorf("%s: a config example mountkeeper refuses: %v\n%s", rel(file), err, m[1])
			}
		}
	}
	if found < 2 {
		t.Errorf("found %d config examples in README.md and docs/*.md, want the README's and configuration.md's", found)
	}
}
