package runtimeconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
			err = replaceFile(c.Path, c.New, c.Mode, c.TempDir)
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

// tempMarker is in the name of every temporary file Apply writes, "."+name+tempMarker+"-"+
// digits beside or above name (a file) or "."+name+tempMarker beside it (a link); isTempName
// recognises them, so that configure and unconfigure remove those a killed run left.
const tempMarker = ".mountkeeper-tmp"

var tempNamePattern = regexp.MustCompile(`^\..+` + regexp.QuoteMeta(tempMarker) + `(-[0-9]+)?$`)

// isTempName says whether a file name is one of Apply's temporary files.
func isTempName(name string) bool { return tempNamePattern.MatchString(name) }

// staleTemps plans removing the temporary files a run killed between write and rename left in
// the directories Apply writes in. One in the drop-in's directory may have been loaded by the
// runtime (CRI-O reads every file there): removing it is a config change.
func staleTemps(o Options) ([]Change, error) {
	var out []Change
	var seen []string
	for _, d := range []string{filepath.Dir(o.DropIn), filepath.Dir(o.ConfigFile), o.dropInTempDir(), o.InstallDir, filepath.Join(o.InstallDir, classDir)} {
		if slices.Contains(seen, d) {
			continue
		}
		seen = append(seen, d)
		names, err := listDir(d)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if isTempName(n) {
				// Old is not read: the file may be half written, or a link.
				out = append(out, Change{Path: filepath.Join(d, n), Old: []byte{}, Binary: true, Config: d == filepath.Dir(o.DropIn)})
			}
		}
	}
	return out, nil
}

// replaceLink makes path a symbolic link to target.
func replaceLink(path, target string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+tempMarker)
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

// replaceFile writes data to path through a temporary file of its own in tempDir ("" for
// path's directory) and a rename; where tempDir is on another filesystem than path, the
// temporary file goes beside path after all. An existing file keeps its permission bits and
// owner (a config of mode 0600, which may hold registry credentials, stays 0600); a symbolic
// link is followed, so the link stays and its target changes; a new file gets mode.
func replaceFile(path string, data []byte, mode fs.FileMode, tempDir string) error {
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
	own := filepath.Dir(path)
	if tempDir == "" {
		tempDir = own
	}
	err := writeAndRename(tempDir, path, data, mode, uid, gid)
	if errors.Is(err, syscall.EXDEV) && tempDir != own {
		err = writeAndRename(own, path, data, mode, uid, gid)
	}
	return err
}

// writeAndRename writes data to a new temporary file in dir, with mode and owner uid:gid (-1:
// unchanged), and renames it onto path; on an error the temporary file is removed.
func writeAndRename(dir, path string, data []byte, mode fs.FileMode, uid, gid int) (err error) {
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+tempMarker+"-*")
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
	beforeRename(f.Name())
	return os.Rename(f.Name(), path)
}

// beforeRename is called with each temporary file before its rename: where a kill then leaves
// it (tests look there).
var beforeRename = func(tmp string) {}
