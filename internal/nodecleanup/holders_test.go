package nodecleanup

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

func TestReadMountinfo(t *testing.T) {
	mi := `612 598 0:42 / /data rw,nosuid,nodev,relatime master:302 - fuse.sshfs root@srv:/x rw,user_id=0,group_id=0
613 598 0:29 /copies/abc/0 /etc/with\040space ro,relatime - tmpfs mountkeeper-subpath rw
614 598 0:29 /copies/abc/1 /etc/second ro,relatime - tmpfs mountkeeper-subpath rw
615 598 0:5 / /dev rw - tmpfs tmpfs rw
`
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte(mi), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want map[string]bool
		got  map[string]string
	}{
		{"a network mount and the copies' tmpfs, first mount point of each, escapes undone",
			map[string]bool{"0:42": true, "0:29": true}, map[string]string{"0:42": "/data", "0:29": "/etc/with space"}},
		{"a device nobody holds", map[string]bool{"0:99": true}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			infos, err := readMountinfo(path, tt.want)
			if got := firstMountOf(infos); err != nil || !maps.Equal(got, tt.got) {
				t.Errorf("readMountinfo = %v, %v; want %v", got, err, tt.got)
			}
		})
	}
}

func TestCgroupV2(t *testing.T) {
	for in, want := range map[string]string{
		"12:pids:/x\n0::/k8s.io/abc\n": "/k8s.io/abc",
		"0::/\n":                       "/",
		"5:cpu:/only-v1\n":             "5:cpu:/only-v1",
	} {
		if got := cgroupV2(in); got != want {
			t.Errorf("cgroupV2(%q) = %q, want %q", in, got, want)
		}
	}
}
