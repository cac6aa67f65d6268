// Package mounttable describes mounts of this mount namespace by mount ID, which is exact even
// where mounts are stacked on one path: with statmount(2) where the kernel has it (Linux >= 6.8),
// else from /proc/self/mountinfo (mount IDs from statx, Linux >= 5.8). It only reads.
//
// Edge cases: a path on a mount that was detached since it was opened has no mountinfo entry
// (an error says so); the fallback reads mountinfo once per call, whatever the number of paths.
package mounttable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"unsafe"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Mount describes one mount of this mount namespace, as statmount(2) or mountinfo tell it.
type Mount struct {
	ID           uint64 // unique mount ID (Linux >= 6.8), else the mountinfo ID
	MountinfoID  int    // the (reusable) ID in /proc/self/mountinfo, field 1
	Root         string // the mount's root within its filesystem (mountinfo field 4)
	Point        string // where it is mounted (mountinfo field 5)
	Major, Minor uint32 // the filesystem's device (mountinfo field 3)
	Shared       bool   // in a peer group ("shared:N")
	Slave        bool   // receives from a master ("master:N")
}

// Propagation names the mount's propagation the way findmnt does.
func (m Mount) Propagation() string {
	switch {
	case m.Shared && m.Slave:
		return "shared,slave"
	case m.Shared:
		return "shared"
	case m.Slave:
		return "slave"
	}
	return "private"
}

// ErrNoStatmount says the kernel cannot describe a mount by itself (statmount(2) and unique
// mount IDs came in Linux 6.8); callers fall back to mountinfo.
var ErrNoStatmount = errors.New("statmount not supported")

// OfPath describes the mount that path (symlinks followed) lies on.
func OfPath(path string) (Mount, error) { return mountAt(unix.AT_FDCWD, path, 0) }

// OfPaths describes the mount each path lies on. Where the kernel has no statmount it
// reads mountinfo once for all of them, not once per path.
func OfPaths(paths []string) ([]Mount, error) {
	ms := make([]Mount, len(paths))
	for i, p := range paths {
		m, err := statmountAt(unix.AT_FDCWD, p, 0)
		if errors.Is(err, ErrNoStatmount) {
			return mountinfoOf(unix.AT_FDCWD, paths, 0)
		}
		if err != nil {
			return nil, err
		}
		ms[i] = m
	}
	return ms, nil
}

// mountAt describes the mount path (relative to dirfd) lies on: statmount, else mountinfo.
func mountAt(dirfd int, path string, flags int) (Mount, error) {
	m, err := statmountAt(dirfd, path, flags)
	if !errors.Is(err, ErrNoStatmount) {
		return m, err
	}
	ms, err := mountinfoOf(dirfd, []string{path}, flags)
	if err != nil {
		return Mount{}, err
	}
	return ms[0], nil
}

// statmountAt answers with two syscalls, whatever the number of mounts on the node: statx
// gives the mount's unique ID, statmount the rest. Reading mountinfo instead costs tens of
// microseconds on a small node and milliseconds on a big one; it is the fallback only.
func statmountAt(dirfd int, path string, flags int) (Mount, error) {
	id, err := statxMountID(dirfd, path, flags)
	if err != nil {
		return Mount{}, err
	}
	if id < UniqueIDOffset {
		return Mount{}, ErrNoStatmount
	}
	return StatmountByID(id)
}

// statxMountID is the ID of the mount path (relative to dirfd) lies on, from statx asked for
// nothing else: the unique ID where the kernel has them (Linux >= 6.8, at or above
// UniqueIDOffset), else the mountinfo ID.
func statxMountID(dirfd int, path string, flags int) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(dirfd, path, flags, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		return 0, &fs.PathError{Op: "statx", Path: path, Err: err}
	}
	switch {
	case stx.Mask&unix.STATX_MNT_ID_UNIQUE != 0:
		return stx.Mnt_id, nil
	case stx.Mask&unix.STATX_MNT_ID != 0 && stx.Mnt_id < UniqueIDOffset:
		return stx.Mnt_id, nil
	}
	return 0, fmt.Errorf("statx %s: the kernel reports no mount ID (Linux 5.8 or newer is needed)", path)
}

// MountinfoOf describes the mount fd lies on from /proc/self/mountinfo: the fallback for
// kernels without statmount, exported so tests can check both agree.
func MountinfoOf(fd int) (Mount, error) {
	ms, err := mountinfoOf(fd, []string{""}, unix.AT_EMPTY_PATH)
	if err != nil {
		return Mount{}, err
	}
	return ms[0], nil
}

// mountinfoOf finds each path's mount by its mount ID (statx, Linux >= 5.8) in one read of
// /proc/self/mountinfo.
func mountinfoOf(dirfd int, paths []string, flags int) ([]Mount, error) {
	ids := make([]int, len(paths))
	want := make(map[int]bool, len(paths))
	for i, p := range paths {
		var stx unix.Statx_t
		if err := unix.Statx(dirfd, p, flags, unix.STATX_MNT_ID, &stx); err != nil {
			return nil, &fs.PathError{Op: "statx", Path: p, Err: err}
		}
		if stx.Mask&unix.STATX_MNT_ID == 0 {
			return nil, fmt.Errorf("statx %s: the kernel reports no mount ID (Linux 5.8 or newer is needed)", p)
		}
		ids[i] = int(stx.Mnt_id)
		want[ids[i]] = true
	}
	infos, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) { return !want[i.ID], false })
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	byID := make(map[int]*mountinfo.Info, len(infos))
	for _, in := range infos {
		byID[in.ID] = in
	}
	ms := make([]Mount, len(paths))
	for i, id := range ids {
		in, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("mount %d holding %s is not in this mount namespace's mountinfo", id, paths[i])
		}
		shared, slave := parseOptional(in.Optional)
		ms[i] = Mount{ID: uint64(id), MountinfoID: id, Root: in.Root, Point: in.Mountpoint,
			Major: uint32(in.Major), Minor: uint32(in.Minor), Shared: shared, Slave: slave}
	}
	return ms, nil
}

// Layout of struct statmount (include/uapi/linux/mount.h); offsets in bytes. The fixed part is
// 512 bytes in every kernel since 6.8 (new fields take spare space); strings follow it.
const (
	smMask           = 8
	smSbDevMajor     = 16
	smSbDevMinor     = 20
	smSbMagic        = 24
	smMntID          = 40
	smMntIDOld       = 56
	smMntPropagation = 72
	smMntRoot        = 104
	smMntPoint       = 108
	smFixedSize      = 512

	statmountSbBasic  = 0x1  // STATMOUNT_SB_BASIC
	statmountMntBasic = 0x2  // STATMOUNT_MNT_BASIC
	statmountMntRoot  = 0x8  // STATMOUNT_MNT_ROOT
	statmountMntPoint = 0x10 // STATMOUNT_MNT_POINT
	statmountWant     = statmountSbBasic | statmountMntBasic | statmountMntRoot | statmountMntPoint
	mntIDReqSizeVer0  = 24 // MNT_ID_REQ_SIZE_VER0
)

// mntIDReq is struct mnt_id_req, version 0.
type mntIDReq struct {
	size  uint32
	spare uint32
	mntID uint64
	param uint64
}

// UniqueIDOffset is where the kernel's unique mount IDs start (MNT_UNIQUE_ID_OFFSET, Linux
// 6.8): an ID at or above it is unique, one below it is a reusable mountinfo ID.
const UniqueIDOffset = 1 << 31

// StatmountByID describes the mount with unique ID id in one syscall.
func StatmountByID(id uint64) (Mount, error) {
	// Two paths follow the fixed part; 1 KiB holds most and EOVERFLOW asks for more.
	buf := make([]byte, smFixedSize+1024)
	for {
		err := statmount(id, statmountWant, buf)
		if errors.Is(err, unix.EOVERFLOW) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return Mount{}, err
		}
		return parseStatmount(buf)
	}
}

// statmount fills buf with struct statmount for mount id, the fields param names: one
// syscall, which asks nothing of the filesystem. ErrNoStatmount where the kernel cannot
// answer; unix.EOVERFLOW (as is) when the strings asked for do not fit in buf.
func statmount(id, param uint64, buf []byte) error {
	req := mntIDReq{size: mntIDReqSizeVer0, mntID: id, param: param}
	_, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req)),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
	switch errno {
	case 0:
		return nil
	case unix.EOVERFLOW:
		return errno
	case unix.ENOSYS, unix.EINVAL:
		return ErrNoStatmount
	}
	return fmt.Errorf("statmount of mount %d: %w", id, errno)
}

func parseStatmount(buf []byte) (Mount, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return Mount{}, ErrNoStatmount // big-endian: let mountinfo answer
	}
	le := binary.LittleEndian
	if le.Uint64(buf[smMask:])&statmountWant != statmountWant {
		return Mount{}, ErrNoStatmount
	}
	str := func(field int) string {
		off := smFixedSize + int(le.Uint32(buf[field:]))
		end := off
		for end < len(buf) && buf[end] != 0 {
			end++
		}
		return string(buf[off:end])
	}
	prop := le.Uint64(buf[smMntPropagation:])
	return Mount{
		ID:          le.Uint64(buf[smMntID:]),
		MountinfoID: int(le.Uint32(buf[smMntIDOld:])),
		Root:        str(smMntRoot),
		Point:       str(smMntPoint),
		Major:       le.Uint32(buf[smSbDevMajor:]),
		Minor:       le.Uint32(buf[smSbDevMinor:]),
		Shared:      prop&unix.MS_SHARED != 0,
		Slave:       prop&unix.MS_SLAVE != 0,
	}, nil
}

// parseOptional reads the propagation out of mountinfo's optional fields ("shared:1 master:2").
func parseOptional(optional string) (shared, slave bool) {
	for _, f := range strings.Fields(optional) {
		shared = shared || strings.HasPrefix(f, "shared:")
		slave = slave || strings.HasPrefix(f, "master:")
	}
	return shared, slave
}

// MountID returns the ID of the mount path (symlinks followed) lies on, from one statx asked
// for nothing else: the unique ID where the kernel has them (Linux >= 6.8), else the mountinfo
// ID. Two paths on one mount have the same ID.
//
// statx needs no getattr, so no round trip to a FUSE daemon or NFS server for the attributes
// (AT_STATX_DONT_SYNC); resolving the path can still ask the filesystem to look up a component
// whose cached entry has expired (a FUSE LOOKUP past its entry timeout).
func MountID(path string) (uint64, error) {
	return statxMountID(unix.AT_FDCWD, path, unix.AT_STATX_DONT_SYNC)
}

// SuperMagic returns the type (statfs(2)'s f_type, a ..._SUPER_MAGIC) of the filesystem of
// mount id (MountID), on which path lies. It never asks the filesystem: statfs(path) would be
// a round trip to it (for sshfs one to the server: hundreds of microseconds, forever when it
// hangs). Where the kernel has statmount(2) it is read from the mount table; else (Linux < 6.8,
// id is then the mountinfo ID) it is the type /proc/self/mountinfo names, as magicOf maps it:
// 0 for a type that table does not know.
func SuperMagic(id uint64, path string) (int64, error) {
	if id < UniqueIDOffset {
		return mountinfoSuperMagic(id, path)
	}
	var buf [smFixedSize]byte
	if err := statmountFixed(id, statmountSbBasic, &buf); err != nil {
		return 0, fmt.Errorf("filesystem type of mount %d holding %s: %w", id, path, err)
	}
	return int64(binary.LittleEndian.Uint64(buf[smSbMagic:])), nil
}

// mountinfoSuperMagic is SuperMagic from one read of /proc/self/mountinfo, for mountinfo ID id.
func mountinfoSuperMagic(id uint64, path string) (int64, error) {
	infos, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) {
		return uint64(i.ID) != id, uint64(i.ID) == id
	})
	if err != nil {
		return 0, fmt.Errorf("read mountinfo: %w", err)
	}
	if len(infos) == 0 {
		return 0, fmt.Errorf("mount %d holding %s is not in this mount namespace's mountinfo", id, path)
	}
	return magicOf(infos[0].FSType), nil
}

// magicOf maps a filesystem type as mountinfo names it (field 9: "ext4", "fuse.sshfs") to the
// f_type statfs(2) reports for it; 0 for a type not listed. It lists the local filesystems a
// node's paths lie on and the network ones they are told apart from; a caller must take 0 as
// "unknown", never as local.
func magicOf(fstype string) int64 {
	if strings.HasPrefix(fstype, "fuse.") {
		return unix.FUSE_SUPER_MAGIC
	}
	switch fstype {
	case "ext2", "ext3", "ext4":
		return unix.EXT4_SUPER_MAGIC // one magic for the three
	case "xfs":
		return unix.XFS_SUPER_MAGIC
	case "btrfs":
		return unix.BTRFS_SUPER_MAGIC
	case "f2fs":
		return unix.F2FS_SUPER_MAGIC
	case "tmpfs", "devtmpfs":
		return unix.TMPFS_MAGIC
	case "ramfs":
		return unix.RAMFS_MAGIC
	case "overlay":
		return unix.OVERLAYFS_SUPER_MAGIC
	case "proc":
		return unix.PROC_SUPER_MAGIC
	case "sysfs":
		return unix.SYSFS_MAGIC
	case "cgroup2":
		return unix.CGROUP2_SUPER_MAGIC
	case "devpts":
		return unix.DEVPTS_SUPER_MAGIC
	case "nfs", "nfs4":
		return unix.NFS_SUPER_MAGIC
	case "fuse", "fuseblk":
		return unix.FUSE_SUPER_MAGIC
	case "virtiofs":
		return unix.FUSE_SUPER_MAGIC // a FUSE filesystem served by the host
	case "9p":
		return unix.V9FS_MAGIC
	case "ceph":
		return unix.CEPH_SUPER_MAGIC
	}
	return 0
}

// statmountFixed asks statmount(2) for the fixed part of struct statmount only, into buf
// (param must name no string field; the caller's buf stays on its stack). ErrNoStatmount
// where the kernel cannot answer or did not fill in param.
func statmountFixed(id, param uint64, buf *[smFixedSize]byte) error {
	if err := statmount(id, param, buf[:]); err != nil {
		return err
	}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 || binary.LittleEndian.Uint64(buf[smMask:])&param != param {
		return ErrNoStatmount // big-endian, or not answered: let the caller fall back
	}
	return nil
}

// PropagationByID tells whether the mount with unique ID id is shared and whether it is a slave,
// in one statmount(2) that asks for nothing else: no path is built or resolved, so it is cheap
// and cannot hang on a dead filesystem. ErrNoStatmount where the kernel cannot answer.
func PropagationByID(id uint64) (shared, slave bool, err error) {
	var buf [smFixedSize]byte
	if err := statmountFixed(id, statmountMntBasic, &buf); err != nil {
		return false, false, err
	}
	prop := binary.LittleEndian.Uint64(buf[smMntPropagation:])
	return prop&unix.MS_SHARED != 0, prop&unix.MS_SLAVE != 0, nil
}

// UniqueIDs says whether the kernel gives mounts unique IDs, which statmount(2) takes (Linux
// >= 6.8). Asked once.
var UniqueIDs = sync.OnceValue(func() bool {
	id, err := MountID("/")
	return err == nil && id >= UniqueIDOffset
})

// moveMountBeneath is MOVE_MOUNT_BENEATH (Linux >= 6.5), not in x/sys/unix yet.
const moveMountBeneath = 0x200

// CanMountBeneath says whether the kernel knows MOVE_MOUNT_BENEATH: nil if it does. move_mount
// checks its flags before anything else: an unknown flag is EINVAL, a known one gets as far as
// the bad descriptor (EBADF). Asked once.
var CanMountBeneath = sync.OnceValue(func() error {
	err := unix.MoveMount(-1, "", -1, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH|moveMountBeneath)
	if err == unix.EINVAL {
		return errors.New("the kernel does not know MOVE_MOUNT_BENEATH (Linux 6.5 or newer has it)")
	}
	return nil
})
