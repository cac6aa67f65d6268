package hook

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/hostmount"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// NamespaceMounter is the real Mounter. On the host it clones each source into a detached
// mount tree and sets the tree's propagation and flags; then one thread of the hook enters
// the container's mount namespace (inMountNamespace) and attaches the trees under the rootfs.
// See the package documentation.
type NamespaceMounter struct{}

var _ Mounter = NamespaceMounter{}

// MountInContainer makes req.Mounts in the mount namespace of req.Pid, all or nothing.
func (nm NamespaceMounter) MountInContainer(req Request) error {
	if len(req.Mounts) == 0 {
		return nil
	}
	ns, err := openNamespace(req.Pid, mountNamespace)
	if err != nil {
		return err
	}
	defer ns.Close()

	attachments := make([]attachment, 0, len(req.Mounts))
	defer func() {
		// A tree that was never attached is dissolved when its last descriptor closes.
		for _, a := range attachments {
			a.tree.Close()
		}
	}()
	for _, m := range req.Mounts {
		tree, dir, err := cloneSource(m, req.UserNS)
		if err != nil {
			return &specmod.MountError{Mount: m, Err: err}
		}
		attachments = append(attachments, attachment{m: m, dir: dir, tree: tree})
	}
	return inMountNamespace(ns, func() error { return attachAll(req.Rootfs, attachments) })
}

// nsKind is a kind of namespace openNamespace opens.
type nsKind struct {
	proc string // its name in /proc/<pid>/ns
	name string // for messages
	own  string // why the hook's own one must not be used
}

var (
	mountNamespace = nsKind{"mnt", "mount", "not a container's: refusing to mount there (is the hook run by the runtime, as prestart or createRuntime?)"}
	userNamespace  = nsKind{"user", "user", "though the spec asks for one of its own: an idmapping with it would map nothing"}
)

// openNamespace opens the namespace of kind (mountNamespace, userNamespace) of pid, the
// container's process, and makes sure it is not the hook's own: mounting "into the
// container" there would mount on the host, idmapping with it would map nothing. Whichever
// kind is opened first, a process that is gone is named as such.
func openNamespace(pid int, kind nsKind) (*os.File, error) {
	path := fmt.Sprintf("/proc/%d/ns/%s", pid, kind.proc)
	ns, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("the container's process %d (pid from the OCI state) does not exist", pid)
		}
		return nil, fmt.Errorf("open the container's %s namespace: %w", kind.name, err)
	}
	var theirs, ours unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &theirs); err != nil {
		ns.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := unix.Stat("/proc/self/ns/"+kind.proc, &ours); err != nil {
		ns.Close()
		return nil, fmt.Errorf("stat /proc/self/ns/%s: %w", kind.proc, err)
	}
	if theirs.Dev == ours.Dev && theirs.Ino == ours.Ino {
		ns.Close()
		return nil, fmt.Errorf("process %d from the OCI state is in the hook's own %s namespace, %s", pid, kind.name, kind.own)
	}
	return ns, nil
}

// cloneSource clones the mount tree at m.Source (recursively) into a detached tree and gives it
// m's propagation, read-only flag and options, recursively. With m.Idmap its top mount (not
// the mounts below it, as runc's "idmap" option) is idmapped with userns, the container's. It reports whether the source is a
// directory. The source is opened by hostmount.OpenSource, which follows no symlink, and the
// tree is cloned from that descriptor: a source swapped for a symlink after the host check
// is refused, never followed.
func cloneSource(m specmod.Mount, userns *os.File) (*os.File, bool, error) {
	attr, err := mountAttr(m)
	if err != nil {
		return nil, false, err
	}
	src, err := hostmount.OpenSource(m.Source)
	var se *hostmount.SymlinkError
	switch {
	case errors.As(err, &se):
		return nil, false, fmt.Errorf("source %s: %w: mountkeeper does not follow symlinks in a source", m.Source, err)
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("source %s does not exist on the host", m.Source)
	case err != nil:
		return nil, false, fmt.Errorf("open the source: %w", err)
	}
	defer src.Close()
	fd, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return nil, false, fmt.Errorf("clone the host mount tree at %s (open_tree): %w", m.Source, err)
	}
	tree := os.NewFile(uintptr(fd), "mount tree of "+m.Source)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		tree.Close()
		return nil, false, fmt.Errorf("stat the cloned tree of %s: %w", m.Source, err)
	}
	if m.Idmap {
		if userns == nil {
			tree.Close()
			return nil, false, errors.New("no user namespace to idmap the mount with")
		}
		err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())})
		if err != nil {
			tree.Close()
			return nil, false, fmt.Errorf("idmap the cloned tree of %s with the container's user namespace (mount_setattr MOUNT_ATTR_IDMAP): %w", m.Source, err)
		}
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		tree.Close()
		return nil, false, fmt.Errorf("set %s on the cloned tree of %s (mount_setattr): %w", describeAttr(m), m.Source, err)
	}
	return tree, st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}

var propagationFlags = map[specmod.Propagation]uint64{
	specmod.Private: unix.MS_PRIVATE,
	specmod.Slave:   unix.MS_SLAVE,
	specmod.Shared:  unix.MS_SHARED,
}

// Options that set or clear one mount attribute; the first of each pair sets it.
var flagOptions = map[string]struct {
	attr uint64
	set  bool
}{
	"nosuid": {unix.MOUNT_ATTR_NOSUID, true}, "suid": {unix.MOUNT_ATTR_NOSUID, false},
	"nodev": {unix.MOUNT_ATTR_NODEV, true}, "dev": {unix.MOUNT_ATTR_NODEV, false},
	"noexec": {unix.MOUNT_ATTR_NOEXEC, true}, "exec": {unix.MOUNT_ATTR_NOEXEC, false},
	"nodiratime": {unix.MOUNT_ATTR_NODIRATIME, true}, "diratime": {unix.MOUNT_ATTR_NODIRATIME, false},
}

// atimeModes are the access time modes; their negations (atime, norelatime, nostrictatime)
// cancel an earlier mode option and otherwise keep the source's mode.
var atimeModes = map[string]uint64{
	"noatime": unix.MOUNT_ATTR_NOATIME, "relatime": unix.MOUNT_ATTR_RELATIME, "strictatime": unix.MOUNT_ATTR_STRICTATIME,
}

var atimeNegations = map[string]string{"atime": "noatime", "norelatime": "relatime", "nostrictatime": "strictatime"}

// mountAttr translates a class mount into mount_setattr(2) attributes, options applied in
// order as mount(8) does (a later option wins).
func mountAttr(m specmod.Mount) (*unix.MountAttr, error) {
	prop, ok := propagationFlags[m.Propagation]
	if !ok {
		return nil, fmt.Errorf("unknown propagation %q", m.Propagation)
	}
	attr := &unix.MountAttr{Propagation: prop}
	if m.ReadOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	atime := ""
	for _, o := range m.Options {
		if f, ok := flagOptions[o]; ok {
			if f.set {
				attr.Attr_set |= f.attr
				attr.Attr_clr &^= f.attr
			} else {
				attr.Attr_clr |= f.attr
				attr.Attr_set &^= f.attr
			}
			continue
		}
		if _, ok := atimeModes[o]; ok {
			atime = o
			continue
		}
		if neg, ok := atimeNegations[o]; ok {
			if atime == neg {
				atime = ""
			}
			continue
		}
		return nil, fmt.Errorf("option %q is not a bind mount option", o)
	}
	if atime != "" {
		attr.Attr_clr |= unix.MOUNT_ATTR__ATIME
		attr.Attr_set |= atimeModes[atime]
	}
	return attr, nil
}

func describeAttr(m specmod.Mount) string {
	parts := []string{string(m.Propagation)}
	if m.ReadOnly {
		parts = append(parts, "ro")
	}
	return strings.Join(append(parts, m.Options...), ",")
}
