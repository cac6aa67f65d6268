package runtimeconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// readFile reads path; a missing file is (nil, false, nil).
func readFile(path string) ([]byte, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// readRequired reads path, saying what it is when it is missing.
func readRequired(path, what string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("%s: no path given", what)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return data, nil
}

// readLink is a symbolic link's target, "" when path is missing or no link.
func readLink(path string) (string, error) {
	target, err := os.Readlink(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL) {
		return "", nil
	}
	return target, err
}

// listDir lists a directory's names in order; a missing one is empty.
func listDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

func notExists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	return false, err
}

// resolveImport resolves an imports entry of the file at parent as containerd does: relative
// to parent's directory, globs expanded.
func resolveImport(parent, entry string) ([]string, error) {
	p := filepath.Clean(entry)
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(parent), p)
	}
	if !strings.Contains(p, "*") {
		return []string{p}, nil
	}
	return filepath.Glob(p)
}

// Apply carries out the plan: it creates the plan's directories (configure), makes each
// change in order, and removes the plan's directories where empty (unconfigure). A replaced
// file keeps its mode and owner (and a symbolic link its target file); every write goes
// through a temporary file and a rename, so the runtime never reads half a file.
func Apply(p Plan) error {
	if !p.Undo {
		for _, d := range p.Dirs {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
	}
	for _, c := range p.Changes {
		var err error
		switch {
		case c.Link != "":
			err = replaceLink(c.Path, c.Link)
		case c.removes():
			err = os.Remove(c.Path)
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		default:
			err = replaceFile(c.Path, c.New, c.Mode)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", c.Path, err)
		}
	}
	if p.Undo {
		for _, d := range p.Dirs {
			// Only an empty directory goes; one that still holds anything (or is a mount
			// point) stays, which is what unconfigure wants.
			_ = syscall.Rmdir(d)
		}
	}
	return nil
}

// replaceLink makes path a symbolic link to target.
func replaceLink(path, target string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".mountkeeper-tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// replaceFile writes data to path through a temporary file of its own in the same directory
// and a rename. An existing file keeps its permission bits and owner (a config of mode 0600,
// which may hold registry credentials, stays 0600); a symbolic link is followed, so the link
// stays and its target changes; a new file gets mode.
func replaceFile(path string, data []byte, mode fs.FileMode) (err error) {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	uid, gid := -1, -1
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(sys.Uid), int(sys.Gid)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".mountkeeper-tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if uid >= 0 {
		if err := f.Chown(uid, gid); err != nil {
			return err
		}
	}
	// After the chown, which clears set-id bits.
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
