package copies

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/subpath"
)

// selinuxXattr is the SELinux label, kept on copies where the source has one.
const selinuxXattr = "security.selinux"

// copyFlags open what a copy reads: for reading, never blocking (a FIFO or device swapped in
// after the type check opens at once and is refused by its type), never a controlling tty.
const copyFlags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// InTree is how an entry below a copied directory is opened, relative to its parent: a symlink
// is copied as a symlink, never followed.
const InTree = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// treeCopier copies what a copy reads; system is the running host's.
type treeCopier interface {
	// CopyTree copies the regular file or directory want, which rel names below dir, to the
	// new path dst, keeping mode, owner and SELinux label, opening nothing but regular files
	// and directories, without blocking and following no symlink below want. charge is told
	// each entry's cost before it is written and stops the copy with its error; ctx is
	// checked before each entry.
	CopyTree(ctx context.Context, dir *subpath.Node, rel string, want *subpath.Node, dst string, charge func(cost int64) error) error
}

// system is treeCopier on the running host.
type system struct{}

var _ treeCopier = system{}

// CopyTree copies the regular file or directory want, which rel (..data/<key>) names below
// the volume directory dir, to dst, which must not exist: the content, mode, owner and
// SELinux label of every entry. The object is opened again from dir through the timestamp
// directory ..data names, with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS and O_NONBLOCK, and must be the inode want is (else the volume changed
// in between: subpath.ErrChanged); every entry below it is opened the same way relative to its parent. Only regular files and
// directories are opened; a symlink inside a directory is copied as a symlink; anything else
// (FIFO, socket, device) is subpath.ErrNotRegular. charge is called before each entry is written
// with what it costs (EntryCost) and stops the copy with its error. ctx is checked before each
// entry. What was written is left for the caller to remove.
func (system) CopyTree(ctx context.Context, dir *subpath.Node, rel string, want *subpath.Node, dst string, charge func(cost int64) error) error {
	if want.Mode != unix.S_IFREG && want.Mode != unix.S_IFDIR {
		return fmt.Errorf("%s is a %s: %w", want.Name, subpath.TypeName(want.Mode), subpath.ErrNotRegular)
	}
	flags := uint64(copyFlags)
	if want.IsDir() {
		flags |= unix.O_DIRECTORY
	}
	// No symlink is followed: the atomic writer's ..data link is read here (it must name a
	// ..<timestamp> directory of the volume), and below it nothing is a symlink.
	var data [256]byte
	n, err := unix.Readlinkat(dir.FD(), "..data", data[:])
	if err != nil {
		return &fs.PathError{Op: "readlink", Path: dir.Name + "/..data", Err: err}
	}
	real, err := subpath.ThroughData(rel, string(data[:n]))
	if err != nil {
		return fmt.Errorf("%s: %w", want.Name, err)
	}
	fd, err := subpath.Openat2(dir.FD(), real, &unix.OpenHow{Flags: flags, Resolve: InTree})
	if err != nil {
		return &fs.PathError{Op: "openat2", Path: want.Name, Err: err}
	}
	now, err := subpath.StatFD(fd, want.Name)
	if err == nil && (now.Dev != want.Dev || now.Ino != want.Ino) {
		err = fmt.Errorf("%s was replaced after it was checked: %w", want.Name, subpath.ErrChanged)
	}
	if err != nil {
		unix.Close(fd)
		return err
	}
	c := copier{ctx: ctx, charge: charge}
	if want.IsDir() {
		return c.dir(fd, want.Name, dst)
	}
	return c.file(fd, want.Name, dst)
}

type copier struct {
	ctx    context.Context
	charge func(cost int64) error
}

// next checks, before an entry, that the copy is still wanted.
func (c *copier) next(name string) error {
	if err := c.ctx.Err(); err != nil {
		return fmt.Errorf("copy of %s given up: %w", name, err)
	}
	return nil
}

// file copies the regular file open at fd (which it closes) to a new file dst.
func (c *copier) file(fd int, name, dst string) error {
	in := os.NewFile(uintptr(fd), name)
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is a %s: %w", name, subpath.TypeName(st.Mode), subpath.ErrNotRegular)
	}
	if err := c.charge(EntryCost(st.Size)); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	// At most what was charged: a file that grows while it is copied is cut there.
	if _, err := io.Copy(out, io.LimitReader(in, st.Size)); err != nil {
		return fmt.Errorf("copy %s: %w", name, err)
	}
	return keepAttrs(fd, name, int(out.Fd()), st)
}

// dir copies the directory open at fd (which it closes) to a new directory dst.
func (c *copier) dir(fd int, name, dst string) error {
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is a %s: %w", name, subpath.TypeName(st.Mode), subpath.ErrNotRegular)
	}
	if err := c.charge(PageSize); err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	for _, e := range names {
		if err := c.next(name); err != nil {
			return err
		}
		if err := c.entry(fd, filepath.Join(name, e), e, filepath.Join(dst, e)); err != nil {
			return err
		}
	}
	out, err := os.Open(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	return keepAttrs(fd, name, int(out.Fd()), st)
}

// entry copies the entry e of the directory open at dirfd.
func (c *copier) entry(dirfd int, name, e, dst string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, e, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "fstatat", Path: name, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR:
		flags := uint64(copyFlags | unix.O_NOFOLLOW)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			flags |= unix.O_DIRECTORY
		}
		fd, err := subpath.Openat2(dirfd, e, &unix.OpenHow{Flags: flags, Resolve: InTree})
		if err != nil {
			return &fs.PathError{Op: "openat2", Path: name, Err: err}
		}
		if flags&unix.O_DIRECTORY != 0 {
			return c.dir(fd, name, dst)
		}
		return c.file(fd, name, dst)
	case unix.S_IFLNK:
		if err := c.charge(PageSize); err != nil {
			return err
		}
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dirfd, e, buf)
		if err != nil {
			return &fs.PathError{Op: "readlink", Path: name, Err: err}
		}
		if err := os.Symlink(string(buf[:n]), dst); err != nil {
			return err
		}
		return os.Lchown(dst, int(st.Uid), int(st.Gid))
	}
	return fmt.Errorf("%s is a %s: %w", name, subpath.TypeName(st.Mode), subpath.ErrNotRegular)
}

// keepAttrs gives the copy at out the owner, mode and SELinux label of the source at in.
func keepAttrs(in int, name string, out int, st unix.Stat_t) error {
	if err := unix.Fchown(out, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("keep the owner of %s: %w", name, err)
	}
	if err := unix.Fchmod(out, st.Mode&0o7777); err != nil {
		return fmt.Errorf("keep the mode of %s: %w", name, err)
	}
	buf := make([]byte, 256)
	n, err := unix.Fgetxattr(in, selinuxXattr, buf)
	switch {
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.ERANGE):
		return nil // no label to keep (ERANGE: none fits a label; SELinux labels are short)
	case err != nil:
		return fmt.Errorf("read the SELinux label of %s: %w", name, err)
	}
	if err := unix.Fsetxattr(out, selinuxXattr, buf[:n], 0); err != nil {
		return fmt.Errorf("keep the SELinux label of %s: %w", name, err)
	}
	return nil
}
