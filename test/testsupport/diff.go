package testsupport

import (
	"bytes"
	"fmt"
	"strings"
)

// LineDiff is a minimal line diff of a and b (longest common subsequence): "-" lines only in
// a, "+" lines only in b, "  " lines in both; of these only the diffContext lines around a
// change are shown, a run of the others as one "  ..." line.
func LineDiff(a, b string) string {
	x, y := strings.Split(strings.TrimSuffix(a, "\n"), "\n"), strings.Split(strings.TrimSuffix(b, "\n"), "\n")
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var lines []string // each "  ", "+ " or "- " and the line
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			lines = append(lines, "  "+x[i])
			i, j = i+1, j+1
		case j < len(y) && (i == len(x) || lcs[i][j+1] >= lcs[i+1][j]):
			lines = append(lines, "+ "+y[j])
			j++
		default:
			lines = append(lines, "- "+x[i])
			i++
		}
	}
	return elideUnchanged(lines)
}

// diffContext is how many unchanged lines LineDiff shows before and after a change.
const diffContext = 3

func elideUnchanged(lines []string) string {
	near := make([]bool, len(lines))
	for k, l := range lines {
		if !strings.HasPrefix(l, "  ") {
			for n := max(0, k-diffContext); n <= min(len(lines)-1, k+diffContext); n++ {
				near[n] = true
			}
		}
	}
	var out bytes.Buffer
	for k, l := range lines {
		switch {
		case near[k]:
			fmt.Fprintf(&out, "%s\n", l)
		case k == 0 || near[k-1]:
			out.WriteString("  ...\n")
		}
	}
	return out.String()
}
