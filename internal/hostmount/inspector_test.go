package hostmount

import "testing"

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
