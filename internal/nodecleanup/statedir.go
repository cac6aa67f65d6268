package nodecleanup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// listState reads what the state directory dir holds (Lstat: no link followed) and, in each
// directory of the layout that holds names of its own, what that holds.
func listState(dir string) ([]entry, error) {
	return listIn(dir, ".", stateLayout)
}

func listIn(root, rel string, layout []owned) ([]entry, error) {
	ents, err := os.ReadDir(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	out := make([]entry, 0, len(ents))
	for _, de := range ents {
		e := entry{Rel: filepath.Join(rel, de.Name()), Type: de.Type()}
		if o, ok := match(layout, e); ok && o.dir && o.inside != nil {
			if e.Children, err = listIn(root, e.Rel, o.inside); err != nil {
				return nil, err
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// removeBeneath removes rel below root, a file or an empty directory, resolving its parent
// below root with no symbolic link followed. A directory that is not empty stays: notEmpty
// says so. One already gone is no error.
func removeBeneath(root string, r removal) (notEmpty bool, err error) {
	path := filepath.Join(root, r.Rel)
	parent, name := filepath.Dir(path), filepath.Base(path)
	rel, err := filepath.Rel(root, parent)
	if err != nil {
		return false, err
	}
	var base int
	if rel == ".." { // the state directory itself, from its parent
		base, err = unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		base, err = unix.Openat2(unix.AT_FDCWD, root, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC})
		if err == nil && rel != "." {
			var fd int
			fd, err = unix.Openat2(base, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
			unix.Close(base)
			base = fd
		}
	}
	if err != nil {
		return false, &fs.PathError{Op: "open", Path: parent, Err: err}
	}
	defer unix.Close(base)
	flags := 0
	if r.Dir {
		flags = unix.AT_REMOVEDIR
	}
	err = unix.Unlinkat(base, name, flags)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return false, nil
	case r.Dir && (errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)):
		return true, nil
	}
	return false, fmt.Errorf("remove %s: %w", path, err)
}
