package harness

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseCgroupV1Hierarchies(t *testing.T) {
	// This machine's layout: separate cpu and cpuacct, a named systemd hierarchy, cgroup2 at
	// unified; the process in a memory cgroup of its own.
	hybrid := strings.Join([]string{
		"30 23 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
		"31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu",
		"36 30 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
		"39 30 0:35 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,release_agent=/x,name=systemd",
		"40 30 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
		"41 23 0:37 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpuacct,cpu",
		"42 23 0:38 / /mnt/elsewhere rw - cgroup cgroup rw,pids",
	}, "\n")
	own := "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu:/\n2:cpu,cpuacct:/x\n0::/\n"
	for _, tc := range []struct {
		name, mountinfo, own string
		want                 []cgroupV1Hierarchy
		err                  string
	}{
		{"hybrid", hybrid, own, []cgroupV1Hierarchy{
			{name: "cpu", options: "cpu", mount: "/sys/fs/cgroup/cpu", self: "/"},
			{name: "memory", options: "memory", mount: "/sys/fs/cgroup/memory", self: "/process_api/abc"},
			{name: "systemd", options: "none,name=systemd", mount: "/sys/fs/cgroup/systemd", self: "/"},
			{name: "cpu,cpuacct", options: "cpuacct,cpu", mount: "/sys/fs/cgroup/cpu,cpuacct", self: "/x"},
		}, ""},
		{"unified host", "40 23 0:36 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate", "0::/user.slice\n", nil, ""},
		{"hierarchy the process has no line for", hybrid, "0::/\n", nil, "/sys/fs/cgroup/cpu (cpu)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCgroupV1Hierarchies(tc.mountinfo, tc.own)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
