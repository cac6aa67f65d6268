package hostmount

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// noSymlinks is how every class source is resolved on the host: no symlink and no /proc magic
// link in any component. A source is an operator's host path; a symlink in it may have been
// put there by a container that can write the parent (another class mount, a hostPath
// volume), and following it would hand the next container whatever it points at.
const noSymlinks = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// SymlinkError says which component of a source is a symlink.
type SymlinkError struct {
	Path      string // the source
	Component string // the first component that is a symlink (or a magic link)
	Target    string // what it points at; "" if it cannot be read
}

func (e *SymlinkError) Error() string {
	return fmt.Sprintf("component %s is a symlink (to %q)", e.Component, e.Target)
}

func (e *SymlinkError) Unwrap() error { return unix.ELOOP }

// OpenSource opens the host path p (absolute) with O_PATH, refusing a symlink or magic link in
// any component with a *SymlinkError. Callers act on the descriptor (fstat, open_tree), never
// on the path again.
func OpenSource(p string) (*os.File, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: noSymlinks}
	for range 16 {
		fd, err := unix.Openat2(unix.AT_FDCWD, p, &how)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), p), nil
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ELOOP):
			return nil, symlinkIn(p)
		}
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return nil, &os.PathError{Op: "open", Path: p, Err: unix.EAGAIN}
}

// symlinkIn finds the first component of p that is a symlink, for the message.
func symlinkIn(p string) error {
	comps := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i := range comps {
		prefix := "/" + strings.Join(comps[:i+1], "/")
		var st unix.Stat_t
		if err := unix.Lstat(prefix, &st); err != nil {
			break
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			buf := make([]byte, unix.PathMax)
			n, _ := unix.Readlink(prefix, buf)
			return &SymlinkError{Path: p, Component: prefix, Target: string(buf[:max(n, 0)])}
		}
	}
	// Swapped back meanwhile, or a magic link mid-path: name the whole source.
	return &SymlinkError{Path: p, Component: p}
}
