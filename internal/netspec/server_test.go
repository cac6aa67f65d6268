package netspec

import (
	"strings"
	"testing"
)

func TestServerAddress(t *testing.T) {
	tests := []struct {
		spec Spec
		want string
		err  string
	}{
		{Spec{Type: "nfs", Source: "filer:/export"}, "filer:2049", ""},
		{Spec{Type: "nfs4", Source: "[fd00::1]:/export", Options: []string{"port=20490"}}, "[fd00::1]:20490", ""},
		{Spec{Type: "cifs", Source: "//files.example.com/share", Options: []string{"password=hunter2"}}, "files.example.com:445", ""},
		{Spec{Type: "glusterfs", Source: "gluster1:/vol0"}, "gluster1:24007", ""},
		{Spec{Type: "ceph", Source: "mon1,mon2:/data"}, "mon1:3300", ""},
		{Spec{Type: "ceph", Source: "admin@fsid.cephfs=/data"}, "", "cannot tell the server"},
		{Spec{Type: "fuse.sshfs", Source: "root@127.0.0.1:/srv", Options: []string{"port=2222"}}, "127.0.0.1:2222", ""},
		{Spec{Type: "fuse.sshfs", Source: "backup:"}, "backup:22", ""},
		{Spec{Type: "fuse.s3fs", Source: "bucket"}, "", "no known server port"},
		{Spec{Type: "nfs", Source: "filer:/x", Options: []string{"port=nfs"}}, "", "port=nfs is not a number"},
	}
	for _, tc := range tests {
		got, err := tc.spec.ServerAddress()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: got %q, %v; want %q", tc.spec, got, err, tc.want)
		}
	}
}
