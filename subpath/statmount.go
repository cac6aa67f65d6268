package subpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// errNoStatmount says the kernel cannot answer per mount (statmount(2) and unique mount IDs
// came in Linux 6.8); the caller falls back to reading mountinfo.
var errNoStatmount = errors.New("statmount not supported")

// Layout of struct statmount (include/uapi/linux/mount.h); offsets in bytes. The fixed part is
// 512 bytes in every kernel since 6.8 (new fields take spare space); strings follow it.
const (
	smMask           = 8
	smSbDevMajor     = 16
	smSbDevMinor     = 20
	smMntID          = 40
	smMntPropagation = 72
	smMntRoot        = 104
	smMntPoint       = 108
	smFixedSize      = 512

	statmountSbBasic  = 0x1  // STATMOUNT_SB_BASIC
	statmountMntBasic = 0x2  // STATMOUNT_MNT_BASIC
	statmountMntRoot  = 0x8  // STATMOUNT_MNT_ROOT
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

// statmountByID describes the mount with unique ID id: two strings and a few numbers, one
// syscall, whatever the number of mounts on the node.
func statmountByID(id uint64) (Mount, error) {
	req := mntIDReq{size: mntIDReqSizeVer0, mntID: id,
		param: statmountSbBasic | statmountMntBasic | statmountMntRoot | statmountMntPoint}
	// Two paths follow the fixed part; 1 KiB holds most and EOVERFLOW asks for more.
	buf := make([]byte, smFixedSize+1024)
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
			return Mount{}, errNoStatmount
		}
		return Mount{}, fmt.Errorf("statmount of mount %d: %w", id, errno)
	}
}

func parseStatmount(buf []byte) (Mount, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return Mount{}, errNoStatmount // big-endian: let mountinfo answer
	}
	le := binary.LittleEndian
	want := uint64(statmountSbBasic | statmountMntBasic | statmountMntRoot | statmountMntPoint)
	if le.Uint64(buf[smMask:])&want != want {
		return Mount{}, errNoStatmount
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
		ID:     le.Uint64(buf[smMntID:]),
		Root:   str(smMntRoot),
		Point:  str(smMntPoint),
		Major:  le.Uint32(buf[smSbDevMajor:]),
		Minor:  le.Uint32(buf[smSbDevMinor:]),
		Shared: prop&unix.MS_SHARED != 0,
		Slave:  prop&unix.MS_SLAVE != 0,
	}, nil
}

// mountFromMountinfo describes the mount fd lies on from /proc/self/mountinfo, for kernels
// without statmount: the whole table is read, which costs milliseconds on a node with
// thousands of mounts, but only a stale mount pays for it.
func mountFromMountinfo(fd int) (Mount, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil {
		return Mount{}, fmt.Errorf("statx: %w", err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return Mount{}, errors.New("the kernel reports no mount ID (Linux 5.8 or newer is needed)")
	}
	id := int(stx.Mnt_id)
	infos, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) {
		return i.ID != id, i.ID == id
	})
	if err != nil {
		return Mount{}, fmt.Errorf("read mountinfo: %w", err)
	}
	if len(infos) != 1 {
		return Mount{}, fmt.Errorf("mount %d is not in this mount namespace's mountinfo", id)
	}
	in := infos[0]
	m := Mount{ID: uint64(id), Root: in.Root, Point: in.Mountpoint, Major: uint32(in.Major), Minor: uint32(in.Minor)}
	for _, f := range strings.Fields(in.Optional) {
		m.Shared = m.Shared || strings.HasPrefix(f, "shared:")
		m.Slave = m.Slave || strings.HasPrefix(f, "master:")
	}
	return m, nil
}
