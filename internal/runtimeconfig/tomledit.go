package runtimeconfig

import (
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// importComment ends the line AddImport adds, so that a reader of the operator's file knows
// where it came from and RemoveImport finds it again.
const importComment = " # added by mountkeeper runtime configure; mountkeeper runtime unconfigure removes it"

// importsLine matches a top-level `imports = [` and captures up to the bracket.
var importsLine = regexp.MustCompile(`(?m)^[ \t]*imports[ \t]*=[ \t]*\[`)

// versionLine matches a top-level `version = N` line.
var versionLine = regexp.MustCompile(`(?m)^[ \t]*version[ \t]*=[ \t]*[0-9]+[ \t]*(#.*)?$`)

// tableHeader matches the first table header: top-level keys come before it.
var tableHeader = regexp.MustCompile(`(?m)^[ \t]*\[`)

// Covers says whether containerd, loading the config at mainPath with imports, reads dropIn:
// an entry names it, or is a glob that matches it (resolved as containerd does: relative to
// the main file's directory).
func Covers(mainPath string, imports []string, dropIn string) bool {
	for _, imp := range imports {
		p := filepath.Clean(imp)
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(mainPath), p)
		}
		if p == dropIn {
			return true
		}
		if strings.Contains(p, "*") {
			if ok, _ := filepath.Match(p, dropIn); ok {
				return true
			}
		}
	}
	return false
}

// AddImport returns src with entry added to its top-level imports, changing nothing else: a
// line of its own (after `version`) when src has no imports, else the entry appended inside
// the existing array. The result is parsed back and must equal src's document plus the entry;
// where it does not, the error says what to add by hand.
func AddImport(src []byte, entry string) ([]byte, error) {
	if strings.ContainsAny(entry, "'\n\r") {
		return nil, fmt.Errorf("the drop-in path %q cannot be written as a TOML literal string", entry)
	}
	before, err := parseDoc(src)
	if err != nil {
		return nil, err
	}
	top := topLevel(src)
	lit := "'" + entry + "'"
	var out []byte
	if loc := importsLine.FindIndex(src[:top]); loc == nil {
		line := "imports = [" + lit + "]" + importComment + "\n"
		at := 0
		if v := versionLine.FindIndex(src[:top]); v != nil {
			// After the version line; before it when nothing (not even a line break) follows
			// it, so that removing the line gives the file back as it was.
			at = v[0]
			if v[1] < len(src) && src[v[1]] == '\n' {
				at = v[1] + 1
			}
		}
		out = slices.Concat(src[:at], []byte(line), src[at:])
	} else {
		closing, err := arrayEnd(src, loc[1])
		if err != nil {
			return nil, fmt.Errorf("%w: add %s to imports yourself", err, lit)
		}
		insert := ", " + lit
		if last := lastValueChar(src[loc[1]:closing]); last == 0 || last == ',' {
			insert = lit
		}
		out = slices.Concat(src[:closing], []byte(insert), src[closing:])
	}
	after, err := parseDoc(out)
	if err != nil {
		return nil, fmt.Errorf("adding %s to imports would break the file (%v): add it yourself", lit, err)
	}
	want := cloneDoc(before)
	want["imports"] = append(anySlice(before["imports"]), entry)
	if !reflect.DeepEqual(after, want) {
		return nil, fmt.Errorf("adding %s to imports changed more than imports: add it yourself", lit)
	}
	return out, nil
}

// RemoveImport undoes AddImport: it returns src without entry in its imports, removing the
// exact text AddImport added, so that a file nobody changed since is restored byte for byte.
// removed is false when src does not name entry.
func RemoveImport(src []byte, entry string) (out []byte, removed bool, err error) {
	before, err := parseDoc(src)
	if err != nil {
		return nil, false, err
	}
	imports := anySlice(before["imports"])
	i := slices.Index(imports, any(entry))
	if i < 0 {
		return src, false, nil
	}
	rest := slices.Delete(slices.Clone(imports), i, i+1)
	lit := "'" + entry + "'"
	ownLine := "imports = [" + lit + "]" + importComment + "\n"
	for _, cut := range []string{ownLine, ", " + lit, lit + ", ", lit + ",", lit} {
		if strings.Count(string(src), cut) != 1 {
			continue
		}
		out := []byte(strings.Replace(string(src), cut, "", 1))
		after, err := parseDoc(out)
		if err != nil {
			continue
		}
		want := cloneDoc(before)
		if cut == ownLine {
			delete(want, "imports")
		} else {
			want["imports"] = rest
		}
		if reflect.DeepEqual(after, want) {
			return out, true, nil
		}
	}
	return nil, false, fmt.Errorf("cannot find where %s sits in imports: remove it yourself", lit)
}

// topLevel is the length of src's part before its first table header.
func topLevel(src []byte) int {
	if loc := tableHeader.FindIndex(src); loc != nil {
		return loc[0]
	}
	return len(src)
}

// arrayEnd is the index of the `]` that closes the array whose content starts at from,
// skipping strings and comments.
func arrayEnd(src []byte, from int) (int, error) {
	depth := 0
	for i := from; i < len(src); i++ {
		switch c := src[i]; c {
		case '\'', '"':
			i = stringEnd(src, i)
		case '#':
			i = lineEnd(src, i)
		case '[':
			depth++
		case ']':
			if depth == 0 {
				return i, nil
			}
			depth--
		}
	}
	return 0, fmt.Errorf("the imports array does not end")
}

// stringEnd is the index of the quote that closes the TOML string opening at b[i] (a basic
// string's escapes skipped), or of the line's end.
func stringEnd(b []byte, i int) int {
	quote := b[i]
	j := i + 1
	for j < len(b) && b[j] != quote && b[j] != '\n' {
		if quote == '"' && b[j] == '\\' {
			j++
		}
		j++
	}
	return j
}

// lineEnd is the index of the line break at or after i, or len(b).
func lineEnd(b []byte, i int) int {
	for i < len(b) && b[i] != '\n' {
		i++
	}
	return i
}

// lastValueChar is the last character of array content b outside comments and white space
// (0 for none); a string counts as its closing quote.
func lastValueChar(b []byte) byte {
	var last byte
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '\'', '"':
			i, last = stringEnd(b, i), c
		case '#':
			i = lineEnd(b, i)
		case ' ', '\t', '\n', '\r':
		default:
			last = c
		}
	}
	return last
}

func parseDoc(src []byte) (map[string]any, error) {
	doc := map[string]any{}
	if err := toml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	return doc, nil
}

func anySlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// cloneDoc copies a parsed document deeply.
func cloneDoc(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return cloneDoc(t)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = cloneValue(e)
		}
		return out
	default:
		return v
	}
}
