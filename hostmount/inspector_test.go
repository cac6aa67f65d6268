package hostmount

import "testing"

func TestParseOptional(t *testing.T) {
	tests := []struct {
		optional              string
		wantShared, wantSlave bool
	}{
		{optional: ""},
		{optional: "shared:1", wantShared: true},
		{optional: "master:7", wantSlave: true},
		{optional: "shared:3 master:7", wantShared: true, wantSlave: true},
		{optional: "master:7 propagate_from:2", wantSlave: true},
		{optional: "unbindable"},
	}
	for _, tt := range tests {
		t.Run(tt.optional, func(t *testing.T) {
			shr, slav := parseOptional(tt.optional)
			if shr != tt.wantShared || slav != tt.wantSlave {
				t.Errorf("parseOptional(%q) = shared %v, slave %v; want shared %v, slave %v",
					tt.optional, shr, slav, tt.wantShared, tt.wantSlave)
			}
		})
	}
}

func TestMountPointPropagation(t *testing.T) {
	tests := []struct {
		mp   MountPoint
		want string
	}{
		{mp: MountPoint{}, want: "private"},
		{mp: MountPoint{Shared: true}, want: "shared"},
		{mp: MountPoint{Slave: true}, want: "slave"},
		{mp: MountPoint{Shared: true, Slave: true}, want: "shared,slave"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.mp.Propagation(); got != tt.want {
				t.Errorf("%+v.Propagation() = %q, want %q", tt.mp, got, tt.want)
			}
		})
	}
}
