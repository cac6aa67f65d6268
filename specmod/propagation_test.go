package specmod_test

import (
	"fmt"
	"testing"

	"github.com/mountkeeper/mountkeeper/specmod"
)

func TestParsePropagation(t *testing.T) {
	tests := []struct {
		in   string
		want specmod.Propagation
	}{
		{in: "rprivate", want: specmod.Private},
		{in: "RPrivate", want: specmod.Private},
		{in: "None", want: specmod.Private},
		{in: "none", want: specmod.Private},
		{in: "NONE", want: specmod.Private},
		{in: "rslave", want: specmod.Slave},
		{in: "RSLAVE", want: specmod.Slave},
		{in: "HostToContainer", want: specmod.Slave},
		{in: "hosttocontainer", want: specmod.Slave},
		{in: "HOSTTOCONTAINER", want: specmod.Slave},
		{in: "rshared", want: specmod.Shared},
		{in: "rShared", want: specmod.Shared},
		{in: "Bidirectional", want: specmod.Shared},
		{in: "bidirectional", want: specmod.Shared},
		{in: "BiDirectional", want: specmod.Shared},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := specmod.ParsePropagation(tt.in)
			if err != nil {
				t.Fatalf("ParsePropagation(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParsePropagation(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParsePropagationRefused(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{name: "empty", in: ""},
		{name: "non-recursive shared", in: "shared"},
		{name: "non-recursive private", in: "private"},
		{name: "non-recursive slave", in: "slave"},
		{name: "unbindable", in: "runbindable"},
		{name: "surrounding space", in: " rshared"},
		{name: "Kubernetes name with spaces", in: "Host To Container"},
		{name: "typo", in: "rshard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := specmod.ParsePropagation(tt.in)
			if err == nil {
				t.Fatalf("ParsePropagation(%q) = %q, want an error", tt.in, got)
			}
			if got != "" {
				t.Errorf("ParsePropagation(%q) returned %q together with its error", tt.in, got)
			}
			want := fmt.Sprintf("unknown propagation %q: use rprivate (None), rslave (HostToContainer) or rshared (Bidirectional)", tt.in)
			if err.Error() != want {
				t.Errorf("ParsePropagation(%q) error\ngot:  %s\nwant: %s", tt.in, err, want)
			}
		})
	}
}

func TestKubernetesName(t *testing.T) {
	tests := []struct {
		p    specmod.Propagation
		want string
	}{
		{p: specmod.Private, want: "None"},
		{p: specmod.Slave, want: "HostToContainer"},
		{p: specmod.Shared, want: "Bidirectional"},
		{p: "shared", want: "shared"},
	}
	for _, tt := range tests {
		t.Run(string(tt.p), func(t *testing.T) {
			if got := tt.p.KubernetesName(); got != tt.want {
				t.Errorf("Propagation(%q).KubernetesName() = %q, want %q", tt.p, got, tt.want)
			}
		})
	}
}
