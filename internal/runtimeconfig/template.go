package runtimeconfig

import (
	"fmt"
	"path/filepath"
	"strings"
)

// The templates k3s and RKE2 render containerd's config.toml from at each start, in its
// directory: the first that exists is used; config-v3.toml.tmpl makes a version-3 config,
// config.toml.tmpl a version-2 one. Either is a Go template in which {{ template "base" . }}
// is the distribution's own config.
const (
	templateV3     = "config-v3.toml.tmpl"
	templateV2     = "config.toml.tmpl"
	baseTemplateOf = `{{ template "base" . }}`
)

// createdTemplateHeader heads a template configure created: unconfigure removes such a file.
const createdTemplateHeader = "# Created by `mountkeeper runtime configure`: the distribution's own config (base) with mountkeeper's drop-in imported; `mountkeeper runtime unconfigure` removes this file.\n"

// templateImportLine is the imports entry configure puts into a template: absolute, since
// the rendered file's directory and the drop-in's are fixed.
func templateImportLine(dropIn string) string {
	return fmt.Sprintf("imports = [%q] # mountkeeper runtime configure; unconfigure removes it\n", dropIn)
}

// templatePath is the template the distribution renders o.ConfigFile from: the one that
// exists, else the one of the rendered file's version.
func templatePath(o Options, version int64) (string, error) {
	dir := filepath.Dir(o.ConfigFile)
	for _, name := range []string{templateV3, templateV2} {
		missing, err := notExists(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		if !missing {
			return filepath.Join(dir, name), nil
		}
	}
	if version < 3 {
		return filepath.Join(dir, templateV2), nil
	}
	return filepath.Join(dir, templateV3), nil
}

// templateChange plans the drop-in's imports entry in the template o.ConfigFile is rendered
// from (Options.Templated): a template of configure's own where there is none; in the
// operator's, a line before its {{ template "base" . }}, where nothing but comments comes
// first (a top-level key after a table would belong to that table).
func templateChange(o Options, version int64) (Change, error) {
	path, err := templatePath(o, version)
	if err != nil {
		return Change{}, err
	}
	old, exists, err := readFile(path)
	if err != nil {
		return Change{}, err
	}
	line := templateImportLine(o.DropIn)
	c := Change{Path: path, Old: orNil(old, exists), Mode: 0o600, Config: true}
	switch text := string(old); {
	case !exists:
		c.New = []byte(createdTemplateHeader + line + baseTemplateOf + "\n")
	case strings.Contains(text, line):
		c.New = old
	default:
		at := strings.Index(text, baseTemplateOf)
		if at < 0 || !onlyComments(text[:at]) {
			return c, fmt.Errorf("%s is the operator's own containerd template and does not start with %s: add %q before its first table (the rendered %s must import mountkeeper's drop-in), then run configure again", path, baseTemplateOf, strings.TrimSpace(line), o.ConfigFile)
		}
		c.New = []byte(text[:at] + line + text[at:])
	}
	return c, nil
}

// onlyComments says whether text has only blank lines and TOML or template comments.
func onlyComments(text string) bool {
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") && !(strings.HasPrefix(l, "{{/*") || strings.HasPrefix(l, "{{- /*")) {
			return false
		}
	}
	return true
}

// untemplateChanges plans taking configure's entry out of the distribution's templates: a
// template configure created goes, the line goes from the operator's.
func untemplateChanges(o Options) ([]Change, error) {
	var out []Change
	line := templateImportLine(o.DropIn)
	for _, name := range []string{templateV3, templateV2} {
		path := filepath.Join(filepath.Dir(o.ConfigFile), name)
		old, ok, err := readFile(path)
		if err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		switch text := string(old); {
		case text == createdTemplateHeader+line+baseTemplateOf+"\n":
			out = append(out, Change{Path: path, Old: old, Config: true})
		case strings.Contains(text, line):
			out = append(out, Change{Path: path, Old: old, New: []byte(strings.Replace(text, line, "", 1)), Config: true})
		}
	}
	return out, nil
}
