package netspec

import (
	"slices"
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

func TestConnectAddresses(t *testing.T) {
	tests := []struct {
		spec Spec
		want []string
	}{
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=4.2", "hard"}}, []string{"filer:2049"}},
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"nfsvers=4", "port=20490"}}, []string{"filer:20490"}},
		{Spec{Type: "nfs4", Source: "[fd00::1]:/export"}, []string{"[fd00::1]:2049"}},
		// Below v4, or with the version left to negotiation, mount.nfs asks rpcbind first.
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=3"}}, []string{"filer:2049", "filer:111"}},
		{Spec{Type: "nfs", Source: "10.0.0.5:/export"}, []string{"10.0.0.5:2049", "10.0.0.5:111"}},
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=3", "port=0"}}, []string{"filer:2049", "filer:111"}},
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=4.1", "port=0"}}, []string{"filer:2049", "filer:111"}},
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"proto=tcp6", "vers=4.2"}}, []string{"filer:2049"}},
		// The kernel takes the last version given.
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=4", "nfsvers=3"}}, []string{"filer:2049", "filer:111"}},
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"nfsvers=3", "vers=4.2"}}, []string{"filer:2049"}},
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=3", "proto=udp"}}, nil},
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=4.1", "proto=rdma"}}, nil},
		{Spec{Type: "nfs", Source: "filer:/export", Options: []string{"udp"}}, nil},
		{Spec{Type: "cifs", Source: "//user@files.example.com/share"}, []string{"files.example.com:445", "files.example.com:139"}},
		{Spec{Type: "cifs", Source: "//files/share", Options: []string{"port=4445"}}, []string{"files:4445"}},
		{Spec{Type: "cifs", Source: "//files/share", Options: []string{"rdma"}}, nil},
		{Spec{Type: "cifs", Source: "//files/share", Options: []string{"port=0"}}, []string{"files:445", "files:139"}},
		// The client connects to ip= (addr=), not to the share's host.
		{Spec{Type: "cifs", Source: "//files.example.com/share", Options: []string{"ip=10.0.0.7"}}, []string{"10.0.0.7:445", "10.0.0.7:139"}},
		{Spec{Type: "cifs", Source: "//files/share", Options: []string{"addr=fd00::7", "port=4445"}}, []string{"[fd00::7]:4445"}},
		{Spec{Type: "ceph", Source: "mon1,mon2:/data"}, nil},
		{Spec{Type: "glusterfs", Source: "gluster1:/vol0"}, nil},
		{Spec{Type: "fuse.sshfs", Source: "root@127.0.0.1:/srv"}, nil},
	}
	for _, tc := range tests {
		if got := tc.spec.ConnectAddresses(); !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %q, want %q", tc.spec, got, tc.want)
		}
	}
}
