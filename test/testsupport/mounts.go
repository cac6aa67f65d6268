package testsupport

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// Mounts returns the mounts of pid's mount namespace that filter keeps (nil: all), in the
// order of its mountinfo (a mount on top of another comes after it). Pid 0 is the calling
// thread, which may have left the process's namespace (unshare on a locked thread).
func Mounts(pid int, filter mountinfo.FilterFunc) ([]*mountinfo.Info, error) {
	if pid == 0 {
		ms, err := mountinfo.GetMounts(filter)
		if err != nil {
			return nil, fmt.Errorf("read mountinfo: %w", err)
		}
		return ms, nil
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := mountinfo.GetMountsFromReader(f, filter)
	if err != nil {
		return nil, fmt.Errorf("read mountinfo of pid %d: %w", pid, err)
	}
	return ms, nil
}

// ParseMounts parses a mountinfo table read elsewhere (e.g. cat /proc/self/mountinfo run in a
// container) and returns the mounts filter keeps (nil: all).
func ParseMounts(table string, filter mountinfo.FilterFunc) ([]*mountinfo.Info, error) {
	ms, err := mountinfo.GetMountsFromReader(strings.NewReader(table), filter)
	if err != nil {
		return nil, fmt.Errorf("parse mountinfo: %w", err)
	}
	return ms, nil
}

// At keeps the mounts whose mount point is path: more than one when mounts are stacked there.
func At(path string) mountinfo.FilterFunc {
	return func(m *mountinfo.Info) (skip, stop bool) { return m.Mountpoint != path, false }
}

// Below keeps the mounts strictly below dir (not dir itself).
func Below(dir string) mountinfo.FilterFunc {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	return func(m *mountinfo.Info) (skip, stop bool) { return !strings.HasPrefix(m.Mountpoint, prefix), false }
}

// AtOrBelow keeps the mounts at dir or below it.
func AtOrBelow(dir string) mountinfo.FilterFunc { return mountinfo.PrefixFilter(dir) }

// MountsAt returns the mounts stacked at path in the calling thread's mount namespace.
func MountsAt(path string) ([]*mountinfo.Info, error) { return Mounts(0, At(path)) }

// Tag returns the value of the optional field name ("shared", "master", "propagate_from")
// of m: "3" for "shared:3". ok is false when m has no such field ("shared" absent: the mount
// is not shared).
func Tag(m *mountinfo.Info, name string) (value string, ok bool) {
	for _, f := range strings.Fields(m.Optional) {
		if v, found := strings.CutPrefix(f, name+":"); found {
			return v, true
		}
	}
	return "", false
}

// PeerGroup returns the peer group ("shared:N") of the topmost mount at path in the calling
// thread's mount namespace, and an error when nothing is mounted there or it is not shared.
func PeerGroup(path string) (string, error) {
	ms, err := MountsAt(path)
	if err != nil {
		return "", err
	}
	if len(ms) == 0 {
		return "", fmt.Errorf("nothing is mounted at %s", path)
	}
	top := ms[len(ms)-1]
	g, ok := Tag(top, "shared")
	if !ok {
		return "", fmt.Errorf("%s is not a shared mount (optional fields %q)", path, top.Optional)
	}
	return g, nil
}
