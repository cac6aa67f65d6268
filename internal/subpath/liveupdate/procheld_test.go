package liveupdate

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseFdinfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want fdInfo
		ok   bool
	}{
		{"linux 6", "pos:\t0\nflags:\t0100000\nmnt_id:\t23\nino:\t3\n", fdInfo{mntID: 23, ino: 3, hasIno: true}, true},
		{"linux 5.10, no ino", "pos:\t0\nflags:\t02\nmnt_id:\t1519\n", fdInfo{mntID: 1519}, true},
		{"eventfd, extra lines", "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\neventfd-count:                0\neventfd-id: 7\n", fdInfo{mntID: 15, ino: 1057, hasIno: true}, true},
		{"inotify lines name other inodes", "pos:\t0\nflags:\t00\nmnt_id:\t15\nino:\t1057\ninotify wd:1 ino:2a sdev:800001 mask:fce ignored_mask:0\n", fdInfo{mntID: 15, ino: 1057, hasIno: true}, true},
		{"no mnt_id", "pos:\t0\nflags:\t02\n", fdInfo{}, false},
		{"empty (gone)", "", fdInfo{}, false},
		{"bad number", "mnt_id:\tx\nino:\t3\n", fdInfo{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseFdinfo([]byte(tc.text))
			if got != tc.want || ok != tc.ok {
				t.Errorf("parseFdinfo = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestMappedInodes(t *testing.T) {
	maps := `555bf7d45000-555bf7d47000 r--p 00000000 fe:00 247278                     /usr/bin/head
7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0
7f1c2b000000-7f1c2b001000 r--s 00000000 00:2d 26                         /var/lib/mountkeeper/subpath/u/c/v/app.conf.v3 (deleted)
7f1c2b001000-7f1c2b002000 r--p 00001000 00:2d 27                         /etc/app.conf
7f1c2b002000-7f1c2b003000 r--p 00000000 00:2e 26                         /other/tmpfs/file
7ffd1e5f0000-7ffd1e611000 rw-p 00000000 00:00 0                          [stack]
garbage line
`
	got := mappedInodes([]byte(maps), unix.Mkdev(0, 0x2d))
	if !slices.Equal(got, []uint64{26, 27}) {
		t.Errorf("inodes mapped from 0:2d = %v, want [26 27] (not 0:2e's 26, nor anonymous maps)", got)
	}
	if got := mappedInodes([]byte(maps), unix.Mkdev(0xfe, 0)); !slices.Equal(got, []uint64{247278}) {
		t.Errorf("inodes mapped from fe:00 = %v, want [247278]", got)
	}
}

func TestMountDevices(t *testing.T) {
	mi := `23 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
45 23 0:45 / /var/lib/mountkeeper/subpath rw shared:20 - tmpfs tmpfs rw,size=65536k
612 598 0:42 / /data rw,nosuid,nodev,relatime master:302 - fuse.sshfs root@srv:/x rw,user_id=0,group_id=0
bad
`
	got := map[int]uint64{}
	mountDevices([]byte(mi), got)
	want := map[int]uint64{23: unix.Mkdev(254, 0), 45: unix.Mkdev(0, 45), 612: unix.Mkdev(0, 42)}
	if len(got) != len(want) {
		t.Errorf("mountDevices = %v, want %v", got, want)
	}
	for id, dev := range want {
		if got[id] != dev {
			t.Errorf("mount %d: device %d:%d, want %d:%d", id, unix.Major(got[id]), unix.Minor(got[id]), unix.Major(dev), unix.Minor(dev))
		}
	}
}

// TestHeldInodesOwnDescriptor: a file this process holds open is found by its device and
// inode, read from fdinfo and mountinfo; another inode of the same device is not.
func TestHeldInodesOwnDescriptor(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	other := st.Ino + 1_000_000
	held := heldInodes(st.Dev, map[uint64]bool{st.Ino: true, other: true}, true)
	if held.unknown || !held.inodes[st.Ino] || held.inodes[other] {
		t.Errorf("heldInodes = %+v, want inode %d held and %d not", held, st.Ino, other)
	}
}
