package nodecleanup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// Holder is a process outside the cleaner's own mount namespace that holds a mount of a
// device: a container with a bind of a network mount or of a subPath copy.
type Holder struct {
	PID        int
	Comm       string
	Cgroup     string // its cgroup v2 path (a container's names the container)
	MountPoint string // where it has the mount, in its own namespace
}

func (h Holder) String() string {
	return fmt.Sprintf("pid %d (%s) in cgroup %s has it at %s", h.PID, h.Comm, h.Cgroup, h.MountPoint)
}

// Holders finds, for each device (major:minor), the processes of other mount namespaces that
// hold a mount of it.
type Holders interface {
	Holders(devices []string) (map[string][]Holder, error)
}

// ProcHolders reads them from /proc: every mount namespace but the cleaner's own (one process
// of each, the first found), and its mountinfo. Why the kernel's view and not the runtime's:
// a mount is in use exactly while some mount namespace holds it, whoever made that namespace
// (containerd, CRI-O, podman, the OCI hook mode, a debugging nsenter); the runtime may be
// stopped during an uninstall; and a container the runtime has forgotten but whose processes
// live on still reads the mount. A namespace that holds a copy for another reason (a service
// with a private /tmp made after the mount) is reported too: refusing is the safe side.
type ProcHolders struct {
	Proc string // default /proc
}

func (p ProcHolders) Holders(devices []string) (map[string][]Holder, error) {
	proc := p.Proc
	if proc == "" {
		proc = "/proc"
	}
	want := make(map[string]bool, len(devices))
	for _, d := range devices {
		want[d] = true
	}
	own, err := os.Readlink(filepath.Join(proc, "self", "ns", "mnt"))
	if err != nil {
		return nil, fmt.Errorf("read the cleaner's mount namespace: %w", err)
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{own: true}
	out := make(map[string][]Holder)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(proc, e.Name())
		ns, err := os.Readlink(filepath.Join(dir, "ns", "mnt"))
		if err != nil || seen[ns] {
			continue // gone meanwhile, a kernel thread, or a namespace already read
		}
		seen[ns] = true
		infos, err := readMountinfo(filepath.Join(dir, "mountinfo"), want)
		if err != nil {
			continue // gone meanwhile
		}
		for dev, point := range firstMountOf(infos) {
			out[dev] = append(out[dev], Holder{PID: pid, Comm: readTrim(filepath.Join(dir, "comm")),
				Cgroup: cgroupV2(readTrim(filepath.Join(dir, "cgroup"))), MountPoint: point})
		}
	}
	return out, nil
}

// readMountinfo reads the mounts of the devices in want from a mountinfo file (the library
// undoes its escapes).
func readMountinfo(path string, want map[string]bool) ([]*mountinfo.Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.GetMountsFromReader(f, func(m *mountinfo.Info) (bool, bool) { return !want[device(m)], false })
}

// firstMountOf is, for each device, the mount point of its first mount in infos.
func firstMountOf(infos []*mountinfo.Info) map[string]string {
	found := make(map[string]string)
	for _, m := range infos {
		if _, ok := found[device(m)]; !ok {
			found[device(m)] = m.Mountpoint
		}
	}
	return found
}

// cgroupV2 is the cgroup v2 path of /proc/<pid>/cgroup ("0::/path"), else its first line.
func cgroupV2(text string) string {
	for _, line := range strings.Split(text, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	first, _, _ := strings.Cut(text, "\n")
	return first
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}
