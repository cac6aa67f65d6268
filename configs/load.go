package configs

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

//go:embed default.yaml
var defaultYAML []byte

// Parse decodes a config strictly (an unknown key, a duplicate key or a second document is an
// error that names it) and validates it.
func Parse(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f file
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("config is empty")
		}
		// The decoder names Go types; the top level is the file, not a type a user knows.
		return nil, errors.New(strings.ReplaceAll(err.Error(), "in type configs.file", "at the top level"))
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("config has more than one YAML document: keep one")
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return f.resolve(), nil
}

// Load reads and parses the config at path. Errors name the path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Default returns the embedded default config.
func Default() *Config {
	c, err := Parse(defaultYAML)
	if err != nil {
		panic(fmt.Sprintf("embedded default config is invalid: %v", err))
	}
	return c
}

// LoadOrDefault loads path; if path is DefaultPath and does not exist, it returns the embedded
// default instead. A path named explicitly must exist. The second value says where the config
// came from, for the start-up log.
func LoadOrDefault(path string) (*Config, string, error) {
	c, err := Load(path)
	if err == nil {
		return c, path, nil
	}
	if path == DefaultPath && errors.Is(err, fs.ErrNotExist) {
		return Default(), "embedded default (" + DefaultPath + " does not exist)", nil
	}
	return nil, "", err
}
