package harness

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountInfo is one line of /proc/self/mountinfo.
type mountInfo struct {
	id         int
	mountPoint string
	fsType     string
}

// readMounts parses /proc/self/mountinfo (proc(5)): field 1 is the mount ID, field 5 the mount
// point, and the filesystem type follows the " - " separator.
func readMounts() ([]mountInfo, error) {
	const path = "/proc/self/mountinfo"
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []mountInfo
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(postFields) < 1 {
			return nil, fmt.Errorf("parse %s line %q", path, line)
		}
		id, err := strconv.Atoi(fields[0])
		if err != nil {
			return nil, fmt.Errorf("parse mount ID in %s line %q: %w", path, line, err)
		}
		out = append(out, mountInfo{id: id, mountPoint: unescapeOctal(fields[4]), fsType: postFields[0]})
	}
	return out, nil
}

// unescapeOctal undoes the \NNN escaping the kernel applies to spaces, tabs, newlines and
// backslashes in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// under reports whether path is dir or lies below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// mountsUnder returns the mounts at or below dir, deepest (then newest) first: the order in
// which they can be unmounted without EBUSY from a mount on top of them.
func mountsUnder(dir string) ([]mountInfo, error) {
	all, err := readMounts()
	if err != nil {
		return nil, err
	}
	var out []mountInfo
	for _, m := range all {
		if under(m.mountPoint, dir) {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		di, dj := strings.Count(out[i].mountPoint, "/"), strings.Count(out[j].mountPoint, "/")
		if di != dj {
			return di > dj
		}
		return out[i].id > out[j].id
	})
	return out, nil
}

// unmountAll unmounts everything at or below dir: container rootfs overlays, sandbox shm
// tmpfs, and whatever a test mounted there. A busy mount is detached lazily, which is enough
// for dir to be removed. It fails naming what is still mounted.
func unmountAll(dir string) error {
	var errs []error
	for range 10 { // a mount can hide another at the same point: repeat until none is left
		mounts, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range mounts {
			err := unix.Unmount(m.mountPoint, unix.UMOUNT_NOFOLLOW)
			if errors.Is(err, unix.EBUSY) {
				err = unix.Unmount(m.mountPoint, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
			}
			// EINVAL/ENOENT: already gone with a parent that was detached.
			if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m.mountPoint, err))
			}
		}
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		errs = append(errs, fmt.Errorf("still mounted: %s (%s)", m.mountPoint, m.fsType))
	}
	return errors.Join(errs...)
}
