package nodecleanup

import (
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
)

// TestPlan: what the cleanup decides from the facts alone.
func TestPlan(t *testing.T) {
	const d = "/s"
	mi := func(id, parent int, point string, minor int) *mountinfo.Info {
		return &mountinfo.Info{ID: id, Parent: parent, Mountpoint: point, Minor: minor, FSType: "tmpfs", Source: "x"}
	}
	file := func(rel string) entry { return entry{Rel: rel} }
	dir := func(rel string, children ...entry) entry {
		return entry{Rel: rel, Type: fs.ModeDir, Children: children}
	}
	held := []Holder{{PID: 7, Comm: "sh", MountPoint: "/data"}}
	net := netmount.HostMount{Dir: "0123456789abcdef", Path: d + "/mounts/0123456789abcdef", Device: "0:50", FSType: "fuse.sshfs", Spec: "fuse.sshfs u@h:/x"}
	agentLeft := []entry{file("guard.key"), file("lock"), dir("locks", file("locks/0123456789abcdef.lock")),
		dir("mounts", dir("mounts/0123456789abcdef")), dir("subpath")}
	mounts := []*mountinfo.Info{mi(5, 1, d+"/mounts", 9), mi(6, 5, net.Path, 50), mi(10, 1, d+"/subpath", 40), mi(11, 10, d+"/subpath/p/0", 40)}
	tests := []struct {
		name string
		f    Facts
		want []string // the plan's lines: Release, then "kept ...", "refused ...", Remove, "foreign ..."
	}{
		{"what an agent leaves: the network mount, its scopes, the live copy before the tmpfs, then the names, the lock last",
			Facts{Network: []netmount.HostMount{net}, Mounts: mounts, Entries: agentLeft, Scopes: true},
			[]string{"release network mount fuse.sshfs u@h:/x at /s/mounts/0123456789abcdef and its scope", "remove the scopes",
				"unmount the live subPath copy's mount 11", "unmount the subPath copies' tmpfs at /s/subpath",
				"unmount /s/mounts (bound onto itself)", "remove the guard key /s/guard.key", "remove /s/locks/0123456789abcdef.lock",
				"remove /s/locks", "remove /s/mounts/0123456789abcdef", "remove /s/mounts", "remove /s/subpath", "remove /s/lock",
				"remove the state directory /s"}},
		{"a container holds the network mount and a copy: both kept, the rest of the release still planned",
			Facts{Network: []netmount.HostMount{net}, Mounts: mounts, Entries: agentLeft,
				Holders: map[string][]Holder{"0:50": held, "0:40": held}},
			[]string{"kept network mount fuse.sshfs u@h:/x", "kept subPath copies (tmpfs)", "unmount /s/mounts (bound onto itself)",
				"remove the guard key /s/guard.key", "remove /s/locks/0123456789abcdef.lock", "remove /s/locks", "remove /s/mounts/0123456789abcdef",
				"remove /s/mounts", "remove /s/subpath", "remove /s/lock", "remove the state directory /s"}},
		{"foreign names stay, and the directories that hold them; a symlink in a name of ours is foreign",
			Facts{Entries: []entry{file("guard.key"), dir("db", file("db/x.sqlite")), dir("state", file("state/notes.txt")),
				{Rel: "secrets", Type: fs.ModeSymlink}, file("lock")}},
			[]string{"remove the guard key /s/guard.key", "remove /s/lock", "foreign /s/db", "foreign /s/state/notes.txt", "foreign /s/secrets"}},
		{"a mount of another filesystem below the copies, and one elsewhere: refused, no copy unmounted",
			Facts{Mounts: []*mountinfo.Info{mi(10, 1, d+"/subpath", 40), mi(11, 10, d+"/subpath/p/0", 77), mi(12, 1, d+"/db", 78)},
				Entries: []entry{dir("subpath")}},
			[]string{"refused /s/db", "refused /s/subpath/p/0 (tmpfs x)", "remove /s/subpath", "remove the state directory /s"}},
		{"no scopes looked for where no network mount was ever made",
			Facts{Entries: []entry{file("guard.key")}, Scopes: true},
			[]string{"remove the guard key /s/guard.key", "remove the state directory /s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.Dir = d
			p := plan(tt.f)
			var got []string
			for _, a := range p.Release {
				got = append(got, a.String())
			}
			for _, k := range p.Kept {
				got = append(got, "kept "+k.What)
			}
			for _, r := range p.Refused {
				got = append(got, "refused "+r)
			}
			for _, a := range p.Remove {
				got = append(got, a.String())
			}
			for _, f := range p.Foreign {
				got = append(got, "foreign "+f)
			}
			if len(got) != len(tt.want) || slices.ContainsFunc(got, func(line string) bool {
				i := slices.Index(got, line)
				return !strings.HasPrefix(line, tt.want[i])
			}) {
				t.Errorf("plan:\n  %s\nwant (prefixes):\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}
