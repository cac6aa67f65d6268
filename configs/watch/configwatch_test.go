package watch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchSeesTheAtomicWriter: a ConfigMap volume's update (new timestamp dir, ..data swap)
// and a plain rewrite both report the new content; a rewrite with the same content does not.
func TestWatchSeesTheAtomicWriter(t *testing.T) {
	dir := t.TempDir()
	if _, err := writeAtomic(dir, map[string]string{"config.yaml": "v1"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	got := make(chan string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	watching := make(chan struct{})
	go func() {
		done <- watch(ctx, path, nil, func(b []byte, err error) {
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			got <- string(b)
		}, watching)
	}()
	defer func() { cancel(); <-done }()
	next := func(want string) {
		t.Helper()
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("Watch reported %q, want %q", g, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Watch reported nothing, want %q", want)
		}
	}
	awaitWatching(t, watching)
	old, err := writeAtomic(dir, map[string]string{"config.yaml": "v2"})
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(old)
	next("v2")
	if _, err := writeAtomic(dir, map[string]string{"config.yaml": "v2"}); err != nil {
		t.Fatal(err)
	}
	target, _ := filepath.EvalSymlinks(path)
	if err := os.WriteFile(target, []byte("v3"), 0o644); err != nil {
		t.Fatal(err)
	}
	next("v3") // the same-content swap before it reported nothing
}

var generation int

// writeAtomic updates dir the way kubelet's atomic writer does: the payload in a new
// ..<timestamp> dir, a ..data_tmp symlink renamed over ..data, a name -> ..data/name symlink.
// It returns the previous payload dir.
func writeAtomic(dir string, files map[string]string) (string, error) {
	generation++
	ts := fmt.Sprintf("..2026_11_23_00_00_00.%d", generation)
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		return "", err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, ts, name), []byte(content), 0o644); err != nil {
			return "", err
		}
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				return "", err
			}
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		return "", err
	}
	if old == "" {
		return "", nil
	}
	return filepath.Join(dir, old), nil
}

// awaitWatching waits until the watch has started (watch closed watching): a change made
// before it would be taken for the first content and not reported.
func awaitWatching(t *testing.T, watching <-chan struct{}) {
	t.Helper()
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not start within 10s")
	}
}
