package guard

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestEnsureKeyReplacesACorruptKey: a key file that a crash left empty, cut short or unwritten
// (zeros) is replaced by a new key at the plugin's start, which says so; containers marked with
// the new key then pass, instead of every class container being refused until someone removes
// the file by hand.
func TestEnsureKeyReplacesACorruptKey(t *testing.T) {
	for name, content := range map[string][]byte{"empty": nil, "torn": []byte("0123456789"), "zeros": make([]byte, keySize)} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, KeyFile)
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := Admit(dir, "ctr", nil); err == nil {
				t.Fatal("Admit passed with a corrupt key")
			}
			k, err := EnsureKey(dir)
			if err != nil {
				t.Fatalf("EnsureKey with a %s key file: %v, want it replaced", name, err)
			}
			if k.Replaced == nil || k.Replaced.Path != path || k.Replaced.Size != len(content) {
				t.Errorf("Replaced = %v, want the %s key file named", k.Replaced, name)
			}
			onDisk, err := LoadKey(dir)
			if err != nil || string(onDisk) != string(k.Bytes) {
				t.Fatalf("the key on disk after the replacement: %v, want the new key", err)
			}
			if err := Admit(dir, "ctr", map[string]string{Annotation: Token(k.Bytes, "ctr")}); err != nil {
				t.Errorf("a container marked with the new key: %v", err)
			}
			again, err := EnsureKey(dir)
			if err != nil || again.Replaced != nil || string(again.Bytes) != string(k.Bytes) {
				t.Errorf("EnsureKey after the replacement: %+v, %v; want the same key, nothing replaced", again, err)
			}
		})
	}
}

// TestEnsureKeyRacingPlugins: plugins that find the same corrupt key at once (each its own
// open of the lock, as separate processes) all end up with one key, the one on disk: a plugin
// that kept a key another one overwrote would mark containers the wrapper then refuses.
func TestEnsureKeyRacingPlugins(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, KeyFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const plugins = 8
	keys := make([]Key, plugins)
	errs := make([]error, plugins)
	var wg sync.WaitGroup
	for i := range plugins {
		wg.Add(1)
		go func() { defer wg.Done(); keys[i], errs[i] = EnsureKey(dir) }()
	}
	wg.Wait()
	onDisk, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	replaced := 0
	for i, k := range keys {
		if errs[i] != nil || string(k.Bytes) != string(onDisk) {
			t.Errorf("plugin %d: key %x (%v), the key on disk is %x", i, k.Bytes, errs[i], onDisk)
		}
		if k.Replaced != nil {
			replaced++
		}
	}
	if replaced != 1 {
		t.Errorf("%d plugins replaced the key, want 1", replaced)
	}
}

// recordingFiles is the node's file system, with each step written down and the step named
// fail failing, as if the node crashed there.
type recordingFiles struct {
	steps []string
	fail  string
}

var errCrash = errors.New("crash")

func (r *recordingFiles) step(name string) error {
	r.steps = append(r.steps, name)
	if name == r.fail {
		return errCrash
	}
	return nil
}

func (r *recordingFiles) CreateTemp(dir, pattern string) (tempFile, error) {
	if err := r.step("create"); err != nil {
		return nil, err
	}
	f, err := liveFiles{}.CreateTemp(dir, pattern)
	return &recordingFile{f, r}, err
}

func (r *recordingFiles) Rename(oldPath, newPath string) error {
	if err := r.step("rename"); err != nil {
		return err
	}
	return liveFiles{}.Rename(oldPath, newPath)
}

func (r *recordingFiles) Remove(path string) error { return liveFiles{}.Remove(path) }

func (r *recordingFiles) SyncDir(dir string) error {
	if err := r.step("syncdir"); err != nil {
		return err
	}
	return liveFiles{}.SyncDir(dir)
}

type recordingFile struct {
	tempFile
	r *recordingFiles
}

func (f *recordingFile) Write(p []byte) (int, error) {
	if err := f.r.step("write"); err != nil {
		return 0, err
	}
	return f.tempFile.Write(p)
}

func (f *recordingFile) Sync() error {
	if err := f.r.step("sync"); err != nil {
		return err
	}
	return f.tempFile.Sync()
}

func (f *recordingFile) Close() error {
	if err := f.r.step("close"); err != nil {
		f.tempFile.Close()
		return err
	}
	return f.tempFile.Close()
}

// TestKeyIsWrittenDurably: the key reaches the disk before its name does (write, fsync, close,
// rename, fsync of the directory), and a write that fails at any step leaves no key file and
// no temporary file: the next start makes the key again.
func TestKeyIsWrittenDurably(t *testing.T) {
	defer func(fsys fileSystem) { osFiles = fsys }(osFiles)
	want := []string{"create", "write", "sync", "close", "rename", "syncdir"}
	dir := t.TempDir()
	rec := &recordingFiles{}
	osFiles = rec
	if _, err := EnsureKey(dir); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.steps, want) {
		t.Errorf("the key was written by %v, want %v", rec.steps, want)
	}
	for _, fail := range want {
		t.Run("crash at "+fail, func(t *testing.T) {
			dir := t.TempDir()
			osFiles = &recordingFiles{fail: fail}
			_, err := EnsureKey(dir)
			if !errors.Is(err, errCrash) {
				t.Fatalf("EnsureKey: %v, want the failure", err)
			}
			left, _ := filepath.Glob(filepath.Join(dir, KeyFile+".*"))
			left = slices.DeleteFunc(left, func(p string) bool { return strings.HasSuffix(p, ".lock") })
			if len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			_, statErr := os.Stat(filepath.Join(dir, KeyFile))
			if fail != "syncdir" && statErr == nil {
				t.Errorf("a key file exists after a failure before the rename")
			}
			osFiles = liveFiles{}
			k, err := EnsureKey(dir)
			if err != nil || k.Replaced != nil {
				t.Errorf("the next start: %+v, %v; want a key, nothing corrupt", k, err)
			}
		})
	}
}
