package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGuardHookBinary: runtime configure installs the lean hook binary for the guard hook when
// it lies beside mountkeeper, and mountkeeper itself otherwise.
func TestGuardHookBinary(t *testing.T) {
	for _, tt := range []struct {
		name   string
		beside func(path string) error // makes (or not) mountkeeper-hook beside mountkeeper
		lean   bool
	}{
		{name: "none beside", beside: func(string) error { return nil }},
		{name: "executable beside", beside: func(p string) error { return os.WriteFile(p, []byte("#!"), 0o755) }, lean: true},
		{name: "not executable", beside: func(p string) error { return os.WriteFile(p, []byte("#!"), 0o644) }},
		{name: "a directory", beside: func(p string) error { return os.Mkdir(p, 0o755) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			self := filepath.Join(dir, "mountkeeper")
			if err := tt.beside(filepath.Join(dir, hookBinaryName)); err != nil {
				t.Fatal(err)
			}
			want := self
			if tt.lean {
				want = filepath.Join(dir, hookBinaryName)
			}
			if got := hookBinaryBeside(self); got != want {
				t.Errorf("hookBinaryBeside = %s, want %s", got, want)
			}
		})
	}
}
