package mounttable

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
