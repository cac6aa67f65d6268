package subpath

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// selinuxXattr is the SELinux label, kept on copies where the source has one.
const selinuxXattr = "security.selinux"

// CopyTree copies the file or directory src was opened as to dst, which must not exist: the
// content, mode, owner and SELinux label of every entry. It reads through src's descriptor and,
// inside a directory, opens each entry relative to its parent with O_NOFOLLOW: no path is
// resolved again and no symlink is followed (one inside a directory is copied as a symlink).
// Other file types (devices, FIFOs, sockets) are refused. It stops with ErrTooLarge once more
// than limit bytes of content were read; what it wrote is left for the caller to remove.
func (Live) CopyTree(src *Node, dst string, limit int64) (int64, error) {
	// Reopen the O_PATH descriptor for reading through its magic link: exactly the object
	// that was checked, whatever its path leads to now.
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if src.IsDir() {
		flags |= unix.O_DIRECTORY
	}
	fd, err := unix.Open(procFD(src.fd), flags, 0)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: src.Name, Err: err}
	}
	c := copier{limit: limit}
	if src.IsDir() {
		err = c.dir(fd, src.Name, dst)
	} else {
		err = c.file(fd, src.Name, dst)
	}
	return c.n, err
}

type copier struct{ n, limit int64 }

// file copies the regular file open at fd (which it closes) to a new file dst.
func (c *copier) file(fd int, name, dst string) error {
	in := os.NewFile(uintptr(fd), name)
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is not a regular file", name)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	n, err := io.Copy(out, io.LimitReader(in, c.limit-c.n+1))
	c.n += n
	switch {
	case err != nil:
		return fmt.Errorf("copy %s: %w", name, err)
	case c.n > c.limit:
		return ErrTooLarge
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
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	for _, e := range names {
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
		flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			flags |= unix.O_DIRECTORY
		}
		fd, err := unix.Openat(dirfd, e, flags, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: name, Err: err}
		}
		if flags&unix.O_DIRECTORY != 0 {
			return c.dir(fd, name, dst)
		}
		return c.file(fd, name, dst)
	case unix.S_IFLNK:
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
	return fmt.Errorf("%s is neither a file, a directory nor a symlink", name)
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

// PrepareCopyDir makes dir a tmpfs of its own (size bytes at most, root only) unless it is one
// already, so that copies of secrets never reach a disk. The tmpfs is shared, so that a copy
// bound into a container with rslave propagation passes the runtime's check.
func PrepareCopyDir(dir string, size int64) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return &fs.PathError{Op: "statfs", Path: dir, Err: err}
	}
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, 0, &stx); err != nil {
		return &fs.PathError{Op: "statx", Path: dir, Err: err}
	}
	if sfs.Type != unix.TMPFS_MAGIC || stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		opts := fmt.Sprintf("mode=0700,size=%d", size)
		// Exec stays allowed: a configMap may hold scripts the container runs.
		if err := unix.Mount("mountkeeper-subpath", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount a tmpfs on %s for subPath copies: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return os.Chmod(dir, 0o700)
}
