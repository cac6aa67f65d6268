// Package idmap asks the kernel whether a host path can be bind-mounted idmapped
// (MOUNT_ATTR_IDMAP), the way runc and the hook will do it for a container with a user
// namespace: clone the mount at the path (open_tree(OPEN_TREE_CLONE)) and set the attribute
// on the detached clone with a user namespace. Whether a filesystem allows it depends on the
// kernel and, for FUSE, on the daemon (it must opt in), so names are never trusted: the
// kernel answers EINVAL for a filesystem that cannot be idmapped.
//
// The probe's user namespace is a placeholder process of this binary's own (holder.go: it
// stops in this package's init), made once per process and kept: the answer
// does not depend on which user namespace is used.
package idmap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/hostmount"
	"github.com/mountkeeper/mountkeeper/internal/reexec"
)

// NotSupportedError says the filesystem at Source cannot be idmapped: the filesystem cannot
// (EINVAL), or this kernel has no idmapped mounts at all (ENOSYS: Linux < 5.12).
type NotSupportedError struct {
	Source string
	FSType string // the mount's type as mountinfo names it (fuse.sshfs, nfs4, ...); "" if unknown
	Err    error  // the kernel's answer (EINVAL, or ENOSYS)
	Call   string // the system call that answered ENOSYS ("" for mount_setattr)
}

func (e *NotSupportedError) Error() string {
	if errors.Is(e.Err, unix.ENOSYS) {
		call := e.Call
		if call == "" {
			call = "mount_setattr"
		}
		return fmt.Sprintf("its %s filesystem cannot be idmapped on this kernel, which has no idmapped mounts (it answers ENOSYS to %s(2); idmapped mounts need Linux 5.12 or newer)", e.fsType(), call)
	}
	answer := e.Err.Error()
	var errno unix.Errno
	if errors.As(e.Err, &errno) && unix.ErrnoName(errno) != "" {
		answer = unix.ErrnoName(errno)
	}
	return fmt.Sprintf("its %s filesystem cannot be idmapped (the kernel answers %s to MOUNT_ATTR_IDMAP)", e.fsType(), answer)
}

func (e *NotSupportedError) fsType() string {
	if e.FSType == "" {
		return "(unknown type)"
	}
	return e.FSType
}

func (e *NotSupportedError) Unwrap() error { return e.Err }

// Check asks the kernel whether the mount at source (resolved without following symlinks) can
// be idmapped with the user namespace userns: nil if it can, a *NotSupportedError if the
// filesystem cannot or the kernel has no idmapped mounts (no mount_setattr or open_tree: ENOSYS),
// another error if the probe itself failed.
func Check(source string, userns *os.File) error {
	src, err := hostmount.OpenSource(source)
	if err != nil {
		return fmt.Errorf("open %s: %w", source, err)
	}
	defer src.Close()
	fd, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.ENOSYS) {
		return &NotSupportedError{Source: source, FSType: FSType(int(src.Fd())), Err: err, Call: "open_tree"}
	}
	if err != nil {
		return fmt.Errorf("clone the mount at %s (open_tree): %w", source, err)
	}
	defer unix.Close(fd) // a detached clone is dissolved with its last descriptor
	return setIdmap(fd, userns, source, func() string { return FSType(int(src.Fd())) })
}

// setIdmap sets MOUNT_ATTR_IDMAP with userns on the detached mount fd, the mount of source
// (for messages), whose type fsType names if the kernel refuses.
func setIdmap(fd int, userns *os.File, source string, fsType func() string) error {
	err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		return &NotSupportedError{Source: source, FSType: fsType(), Err: err}
	}
	return fmt.Errorf("idmap a clone of the mount at %s (mount_setattr MOUNT_ATTR_IDMAP): %w", source, err)
}

// tmpfsSource names the tmpfs CheckTmpfs makes, in its messages.
const tmpfsSource = "a new tmpfs"

// CheckTmpfs asks the kernel whether a tmpfs can be idmapped with userns (tmpfs gained
// idmapped mounts in Linux 6.3): on a tmpfs made for the question and never attached anywhere
// (fsopen, fsmount), so nothing on the node is touched and nothing is left when it returns.
// Answers as Check.
func CheckTmpfs(userns *os.File) error {
	tmpfs := func() string { return "tmpfs" }
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if errors.Is(err, unix.ENOSYS) {
		return &NotSupportedError{Source: tmpfsSource, FSType: tmpfs(), Err: err, Call: "fsopen"}
	}
	if err != nil {
		return fmt.Errorf("make %s (fsopen): %w", tmpfsSource, err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("make %s (fsconfig): %w", tmpfsSource, err)
	}
	fd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("make %s (fsmount): %w", tmpfsSource, err)
	}
	defer unix.Close(fd) // a detached mount is dissolved with its last descriptor
	return setIdmap(fd, userns, tmpfsSource, tmpfs)
}

// FSType names the filesystem type of the mount fd lies on, as mountinfo does ("" if it
// cannot be found).
func FSType(fd int) string {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
		return ""
	}
	infos, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) {
		return i.ID != int(stx.Mnt_id), i.ID == int(stx.Mnt_id)
	})
	if err != nil || len(infos) == 0 {
		return ""
	}
	return infos[0].FSType
}

// Prober checks sources with a user namespace of its own, each check bounded in time (a
// source below a dead network filesystem can hang its open).
type Prober struct {
	Timeout time.Duration // 0: hostmount.DefaultTimeout

	mu     sync.Mutex
	userns *os.File
	// tmpfs is CheckTmpfs's answer once the kernel gave one (nil or a *NotSupportedError):
	// it is the kernel's, and does not change.
	tmpfs      error
	tmpfsKnown bool
}

// Default is the process's prober.
var Default = &Prober{}

// ProberWith is a prober that probes with userns, which the caller keeps open while the
// prober is used, instead of a placeholder's: the hook probes with the container's own user
// namespace, which is also what it then idmaps with, and needs no placeholder.
func ProberWith(userns *os.File) *Prober { return &Prober{userns: userns} }

// Check is the package's Check with p's user namespace, bounded by p.Timeout.
func (p *Prober) Check(source string) error {
	userns, err := p.userNS()
	if err != nil {
		return err
	}
	d := p.Timeout
	if d == 0 {
		d = hostmount.DefaultTimeout
	}
	_, err = bounded.Do(bounded.Default, d, bounded.Key{Paths: []string{source}, Call: "idmap " + source}, "check whether "+source+" can be idmapped",
		func() (struct{}, error) { return struct{}{}, Check(source, userns) })
	return err
}

// CheckTmpfs is the package's CheckTmpfs with p's user namespace, asked once: the kernel's
// answer is kept (an error that is not the kernel's answer is not).
func (p *Prober) CheckTmpfs() error {
	p.mu.Lock()
	known, answer := p.tmpfsKnown, p.tmpfs
	p.mu.Unlock()
	if known {
		return answer
	}
	userns, err := p.userNS()
	if err != nil {
		return err
	}
	err = CheckTmpfs(userns)
	var ns *NotSupportedError
	if err == nil || errors.As(err, &ns) {
		p.mu.Lock()
		p.tmpfs, p.tmpfsKnown = err, true
		p.mu.Unlock()
	}
	return err
}

func (p *Prober) userNS() (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.userns != nil {
		return p.userns, nil
	}
	ns, err := NewUserNS()
	if err != nil {
		return nil, err
	}
	p.userns = ns
	return ns, nil
}

// NewUserNS returns a descriptor of a new user namespace (root mapped to host uid and gid
// 65534 and nothing else), held by nothing else: it lives as long as the descriptor. It
// starts this binary as a placeholder (holder.go), so main must dispatch with reexec.Init.
func NewUserNS() (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	defer w.Close()
	var said strings.Builder
	cmd := reexec.Command(userNSPlaceholder)
	cmd.Env = []string{}
	cmd.Stdin = r
	cmd.Stdout = &said
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a process in a new user namespace (to ask the kernel whether a filesystem can be idmapped): %w", err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	w.Close() // the placeholder exits
	switch werr := cmd.Wait(); {
	case err != nil:
	case werr != nil:
		err = fmt.Errorf("the user namespace placeholder failed: %w", werr)
	case said.String() != placeholderDone:
		// Something else ran: this binary's main does not dispatch to reexec entries.
		err = fmt.Errorf("the user namespace placeholder did not run (is reexec.Init called first in main or TestMain?)")
	}
	if err != nil {
		if ns != nil {
			ns.Close()
		}
		if errors.Is(err, fs.ErrNotExist) {
			err = errors.New("the user namespace placeholder exited before its namespace could be opened")
		}
		return nil, err
	}
	unix.CloseOnExec(int(ns.Fd()))
	return ns, nil
}
