//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// hostMount is one line of this mount namespace's mountinfo.
type hostMount struct{ id, dev, point, fstype string }

// mountLine shows m as its mountinfo line does (fields unescaped), for messages and
// snapshots; "" for nil.
func mountLine(m *mountinfo.Info) string {
	if m == nil {
		return ""
	}
	return fmt.Sprintf("%d %d %d:%d %s %s %s %s - %s %s %s", m.ID, m.Parent, m.Major, m.Minor, m.Root, m.Mountpoint,
		m.Options, m.Optional, m.FSType, m.Source, m.VFSOptions)
}

// mountLines shows ms one mountinfo line each.
func mountLines(ms []*mountinfo.Info) string {
	lines := make([]string, len(ms))
	for i, m := range ms {
		lines[i] = mountLine(m)
	}
	return strings.Join(lines, "\n")
}

// hostMounts returns the host's mounts whose mount point lies below dir.
func hostMounts(t testing.TB, dir string) []*mountinfo.Info {
	t.Helper()
	ms, err := testsupport.Mounts(0, testsupport.Below(dir))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// mountsBelow returns the mounts of a mountinfo table read elsewhere whose mount point lies
// below dir.
func mountsBelow(t testing.TB, table, dir string) []*mountinfo.Info {
	t.Helper()
	return parseTable(t, table, testsupport.Below(dir))
}

// parseTable returns the mounts of a mountinfo table read elsewhere that filter keeps.
func parseTable(t testing.TB, table string, filter mountinfo.FilterFunc) []*mountinfo.Info {
	t.Helper()
	ms, err := testsupport.ParseMounts(table, filter)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// readMountinfo returns /proc/PID/mountinfo as the kernel wrote it, for comparing whole
// tables.
func readMountinfo(t *testing.T, pid string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// mountsIn returns the mounts at dst of a mountinfo table read elsewhere, in its order.
func mountsIn(t testing.TB, table, dst string) []*mountinfo.Info {
	t.Helper()
	return parseTable(t, table, testsupport.At(dst))
}

// mountIn returns the first mount at dst of a mountinfo table read elsewhere, or nil.
func mountIn(t testing.TB, table, dst string) *mountinfo.Info {
	t.Helper()
	if ms := mountsIn(t, table, dst); len(ms) > 0 {
		return ms[0]
	}
	return nil
}

// devOf is m's device as mountinfo shows it (major:minor).
func devOf(m *mountinfo.Info) string { return fmt.Sprintf("%d:%d", m.Major, m.Minor) }

// peerGroup returns the peer group number of the shared host mount holding path.
func peerGroup(t *testing.T, path string) string {
	t.Helper()
	m, err := mounttable.OfPath(path)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := testsupport.MountsAt(m.Point)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) > 0 {
		if g, ok := testsupport.Tag(ms[0], "shared"); ok {
			return g
		}
		t.Fatalf("host mount %s is not shared: %q", m.Point, ms[0].Optional)
	}
	t.Fatalf("host mount %s is not shared: nothing is mounted there", m.Point)
	return ""
}

// mountLayers counts the mounts at path in a mountinfo table.
func mountLayers(t testing.TB, table, path string) int {
	t.Helper()
	return len(mountsIn(t, table, path))
}

// mountIDsAt are the mount IDs of the mounts at path in a mountinfo table, in its order.
func mountIDsAt(t testing.TB, table, path string) []string {
	t.Helper()
	var ids []string
	for _, m := range mountsIn(t, table, path) {
		ids = append(ids, strconv.Itoa(m.ID))
	}
	return ids
}

// mountIDAt returns the mount ID of the top mount at point.
func mountIDAt(t *testing.T, point string) string {
	t.Helper()
	ms, err := testsupport.MountsAt(point)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatalf("no mount at %s", point)
	}
	return strconv.Itoa(ms[len(ms)-1].ID)
}

// countMountsBelow counts the mounts at or below dir in this mount namespace.
func countMountsBelow(t *testing.T, dir string) int {
	t.Helper()
	ms, err := testsupport.Mounts(0, testsupport.AtOrBelow(dir))
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
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
	ms, err := testsupport.Mounts(0, func(m *mountinfo.Info) (skip, stop bool) {
		return filepath.Dir(m.Mountpoint) != dir || !strings.HasPrefix(m.FSType, "fuse"), false
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []hostMount
	for _, m := range ms {
		out = append(out, hostMount{id: strconv.Itoa(m.ID), dev: devOf(m), point: m.Mountpoint, fstype: m.FSType})
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
