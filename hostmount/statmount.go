package hostmount

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"unsafe"

	"golang.org/x/sys/unix"
)

// errNoStatmount says the kernel cannot answer per mount (statmount(2) and unique mount IDs
// came in Linux 6.8); the caller falls back to reading mountinfo.
var errNoStatmount = errors.New("statmount not supported")

// Layout of struct statmount (include/uapi/linux/mount.h). The fixed part is 512 bytes in
// every kernel since 6.8 (new fields take spare space); strings follow it.
const (
	smMask           = 8
	smMntIDOld       = 56
	smMntPropagation = 72
	smMntPoint       = 108
	smFixedSize      = 512

	statmountMntBasic = 0x2  // STATMOUNT_MNT_BASIC
	statmountMntPoint = 0x10 // STATMOUNT_MNT_POINT
	mntIDReqSizeVer0  = 24   // MNT_ID_REQ_SIZE_VER0
)

// mntIDReq is struct mnt_id_req, version 0.
type mntIDReq struct {
	size  uint32
	spare uint32
	mntID uint64
	param uint64
}

// statmountOf answers for one path with two syscalls, whatever the number of mounts on the
// node: statx gives the mount's unique ID, statmount its propagation and mount point. Reading
// mountinfo instead costs tens of microseconds per call on a small node and grows with it.
func statmountOf(path string) (MountPoint, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		return MountPoint{}, &fs.PathError{Op: "statx", Path: path, Err: err}
	}
	if stx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return MountPoint{}, errNoStatmount
	}
	// The mount point's path is a string after the fixed part; 512 bytes hold most paths and
	// EOVERFLOW asks for more.
	req := mntIDReq{size: mntIDReqSizeVer0, mntID: stx.Mnt_id, param: statmountMntBasic | statmountMntPoint}
	buf := make([]byte, smFixedSize+512)
	for {
		_, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req)),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
		switch errno {
		case 0:
			return parseStatmount(buf)
		case unix.EOVERFLOW:
			buf = make([]byte, 2*len(buf))
			continue
		case unix.ENOSYS, unix.EINVAL:
			return MountPoint{}, errNoStatmount
		}
		return MountPoint{}, fmt.Errorf("statmount of the mount holding %s: %w", path, errno)
	}
}

func parseStatmount(buf []byte) (MountPoint, error) {
	le := binary.LittleEndian
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return MountPoint{}, errNoStatmount // big-endian: let mountinfo answer
	}
	mask := le.Uint64(buf[smMask:])
	if mask&statmountMntBasic == 0 || mask&statmountMntPoint == 0 {
		return MountPoint{}, errNoStatmount
	}
	prop := le.Uint64(buf[smMntPropagation:])
	off := smFixedSize + int(le.Uint32(buf[smMntPoint:]))
	end := off
	for end < len(buf) && buf[end] != 0 {
		end++
	}
	return MountPoint{
		ID:     int(le.Uint32(buf[smMntIDOld:])),
		Path:   string(buf[off:end]),
		Shared: prop&unix.MS_SHARED != 0,
		Slave:  prop&unix.MS_SLAVE != 0,
	}, nil
}
