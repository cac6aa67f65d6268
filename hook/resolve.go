package hook

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// beneath is how every destination is resolved: relative to the rootfs descriptor, never
// above it (".." at the root, an absolute symlink, or a relative one that climbs out fail
// with EXDEV), and never through a /proc magic link (ELOOP).
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// openat2 opens rel relative to dir with O_PATH, retrying the EAGAIN that RESOLVE_BENEATH
// returns when a rename races with the walk.
func openat2(dir *os.File, rel string, flags uint64, resolve uint64) (*os.File, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | flags, Resolve: resolve}
	for range 16 {
		fd, err := unix.Openat2(int(dir.Fd()), rel, &how)
		if err == nil {
			return os.NewFile(uintptr(fd), rel), nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			return nil, err
		}
	}
	return nil, unix.EAGAIN
}

// resolveDestination opens the container path dst (absolute, clean: validated by specmod)
// beneath root and returns an O_PATH descriptor of it. Missing components are created one at
// a time: directories, and a file for the last one when dir is false (the source is a file).
// Each is created with mkdirat/openat(O_EXCL) in its already-resolved parent and re-opened
// with RESOLVE_NO_SYMLINKS, so a component swapped for a symlink meanwhile is not followed.
// Each creation is recorded in undo.
func resolveDestination(root *os.File, dst string, dir bool, undo *undoLog) (*os.File, error) {
	rel := strings.TrimPrefix(dst, "/")
	if rel == "" || rel != strings.Trim(rel, "/") {
		return nil, fmt.Errorf("destination %q is not a clean absolute path below /", dst)
	}
	f, err := openat2(root, rel, 0, beneath)
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return nil, explainResolve(root, dst, err)
	}
	comps := strings.Split(rel, "/")
	parent, err := openat2(root, ".", 0, beneath)
	if err != nil {
		return nil, fmt.Errorf("open the container's rootfs: %w", err)
	}
	for i, c := range comps {
		prefix := strings.Join(comps[:i+1], "/")
		f, err := openat2(root, prefix, 0, beneath)
		if err == nil {
			parent.Close()
			parent = f
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			parent.Close()
			return nil, explainResolve(root, dst, err)
		}
		mkDir := dir || i < len(comps)-1
		if err := create(parent, c, mkDir); err != nil {
			parent.Close()
			if errors.Is(err, unix.EEXIST) {
				// It exists, yet resolving it found nothing: a dangling symlink.
				return nil, explainResolve(root, dst, unix.ENOENT)
			}
			return nil, fmt.Errorf("destination %s: create /%s in the container: %w", dst, prefix, err)
		}
		undo.add(removeFunc(parent, c, mkDir, "/"+prefix))
		f, err = openat2(parent, c, unix.O_NOFOLLOW, beneath|unix.RESOLVE_NO_SYMLINKS)
		if err != nil {
			parent.Close()
			return nil, fmt.Errorf("destination %s: open /%s just created: %w", dst, prefix, err)
		}
		parent.Close()
		parent = f
	}
	return parent, nil
}

// create makes name in dir: a directory, or an empty file as a mount point for a file.
func create(dir *os.File, name string, isDir bool) error {
	if isDir {
		return unix.Mkdirat(int(dir.Fd()), name, 0o755)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// removeFunc returns the undo step of a create: it removes name from a duplicate of dir's
// descriptor, taken now, since the caller closes dir.
func removeFunc(dir *os.File, name string, isDir bool, shown string) func() error {
	dup, err := unix.FcntlInt(dir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return func() error { return fmt.Errorf("remove %s: keep its parent: %w", shown, err) }
	}
	return func() error {
		defer unix.Close(dup)
		flags := 0
		if isDir {
			flags = unix.AT_REMOVEDIR
		}
		if err := unix.Unlinkat(dup, name, flags); err != nil {
			return fmt.Errorf("remove %s, created as a mount point: %w", shown, err)
		}
		return nil
	}
}

// explainResolve turns a failed resolution of dst into a message that names the component
// at fault, and the symlink and its target where one is to blame.
func explainResolve(root *os.File, dst string, cause error) error {
	comps := strings.Split(strings.TrimPrefix(dst, "/"), "/")
	for i := range comps {
		prefix := strings.Join(comps[:i+1], "/")
		f, err := openat2(root, prefix, 0, beneath)
		if err == nil {
			f.Close()
			continue
		}
		shown := "/" + prefix
		target, isLink := readlinkBeneath(root, strings.Join(comps[:i], "/"), comps[i])
		link := ""
		if isLink {
			link = fmt.Sprintf("%s is a symlink to %q", shown, target)
		}
		switch {
		case errors.Is(err, unix.EXDEV) && isLink:
			return fmt.Errorf("destination %s: %s, which leads out of the container's rootfs (resolved beneath the rootfs, an absolute symlink or one climbing above it leaves it): refusing to mount through it", dst, link)
		case errors.Is(err, unix.EXDEV):
			return fmt.Errorf("destination %s: %s leads out of the container's rootfs: refusing to mount through it", dst, shown)
		case errors.Is(err, unix.ELOOP) && isMagicLink(root, prefix):
			return fmt.Errorf("destination %s: %s leads through a /proc magic link (like /proc/self/root), which could leave the container's rootfs: refusing to mount through it", dst, shown)
		case errors.Is(err, unix.ELOOP) && isLink:
			return fmt.Errorf("destination %s: %s, which loops (too many levels of symbolic links): refusing to mount through it", dst, link)
		case errors.Is(err, unix.ENOENT) && isLink:
			return fmt.Errorf("destination %s: %s, which does not exist in the container: mountkeeper does not create a symlink's target", dst, link)
		case errors.Is(err, unix.ENOTDIR) && i > 0:
			// The parent opened fine but is not a directory (a file, a device).
			return fmt.Errorf("destination %s: /%s is not a directory in the container", dst, strings.Join(comps[:i], "/"))
		}
		return fmt.Errorf("destination %s: resolve %s beneath the container's rootfs: %w", dst, shown, err)
	}
	return fmt.Errorf("destination %s: resolve beneath the container's rootfs: %w", dst, cause)
}

// readlinkBeneath reads the symlink name in the directory parent (relative to root), if it
// is one.
func readlinkBeneath(root *os.File, parent, name string) (string, bool) {
	if parent == "" {
		parent = "."
	}
	dir, err := openat2(root, parent, 0, beneath)
	if err != nil {
		return "", false
	}
	defer dir.Close()
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

// isMagicLink tells a magic link from a symlink loop: both fail with ELOOP under
// RESOLVE_NO_MAGICLINKS, but only a magic link still fails (with EXDEV, as a scoped lookup
// never jumps) when that flag is left out.
func isMagicLink(root *os.File, rel string) bool {
	f, err := openat2(root, rel, 0, unix.RESOLVE_BENEATH)
	if err == nil {
		f.Close()
		return false
	}
	return errors.Is(err, unix.EXDEV)
}
