//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

// hostMount is one line of this mount namespace's mountinfo.
type hostMount struct{ id, dev, point, fstype string }

// hostMounts returns the host's mountinfo lines whose mount point lies below dir.
func hostMounts(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return mountsBelow(string(data), dir)
}

func mountsBelow(mountinfo, dir string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, line)
		}
	}
	return out
}

func readMountinfo(t *testing.T, pid string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// mountinfoLine returns the mountinfo line whose mount point is dst, or "".
func mountinfoLine(mountinfo, dst string) string {
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dst {
			return line
		}
	}
	return ""
}

// peerGroup returns the peer group number of the shared host mount holding path.
func peerGroup(t *testing.T, path string) string {
	t.Helper()
	m, err := mounttable.OfPath(path)
	if err != nil {
		t.Fatal(err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	dir := m.Point
	fields, _, _ := strings.Cut(mountinfoLine(string(mi), dir), " - ")
	for _, f := range strings.Fields(fields) {
		if g, ok := strings.CutPrefix(f, "shared:"); ok {
			return g
		}
	}
	t.Fatalf("host mount %s is not shared: %q", dir, fields)
	return ""
}

// mountLayers counts the mounts at path in a mountinfo table.
func mountLayers(mountinfo, path string) int {
	return len(mountIDsAt(mountinfo, path))
}

// mountIDsAt are the mount IDs (first field) of the mounts at path in a mountinfo table, in
// its order.
func mountIDsAt(mountinfo, path string) []string {
	var ids []string
	for _, line := range strings.Split(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			ids = append(ids, f[0])
		}
	}
	return ids
}

// mountIDAt returns the mount ID (mountinfo's first field) of the top mount at point.
func mountIDAt(t *testing.T, point string) string {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	ids := mountIDsAt(string(mi), point)
	if len(ids) == 0 {
		t.Fatalf("no mount at %s", point)
	}
	return ids[len(ids)-1]
}

// countMountsBelow counts the mounts at or below dir in this mount namespace.
func countMountsBelow(t *testing.T, dir string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			n++
		}
	}
	return n
}

// fuseMountsAt counts the mounts at path in this mount namespace.
func fuseMountsAt(t *testing.T, path string) int {
	t.Helper()
	n, err := harness.MountsAt(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// fuseMountsBelow returns the FUSE mounts directly below dir.
func fuseMountsBelow(t *testing.T, dir string) []hostMount {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []hostMount
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		sep := 0
		for i, v := range f {
			if v == "-" {
				sep = i
				break
			}
		}
		if sep == 0 || sep+1 >= len(f) {
			continue
		}
		m := hostMount{id: f[0], dev: f[2], point: f[4], fstype: f[sep+1]}
		if filepath.Dir(m.point) == dir && strings.HasPrefix(m.fstype, "fuse") {
			out = append(out, m)
		}
	}
	return out
}

func mountAt(t *testing.T, dir, point string) (hostMount, bool) {
	for _, m := range fuseMountsBelow(t, dir) {
		if m.point == point {
			return m, true
		}
	}
	return hostMount{}, false
}
