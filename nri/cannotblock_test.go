package nri

import (
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/classmount"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// TestCannotBlock: a decision runs on the request's goroutine only when the host check is its
// one step that can wait on the host, and that check bounds itself below createBudget.
func TestCannotBlock(t *testing.T) {
	subPathMount := oci.Mount{Source: "/var/lib/kubelet/pods/uid/volume-subpaths/vol/app/0", Destination: "/cfg"}
	for _, tt := range []struct {
		name, config string
		req          classmount.Request
		want         bool
	}{
		{"bind class", networkTestConfig, classmount.Request{Handler: "plain"}, true},
		{"no class", networkTestConfig, classmount.Request{Handler: "kata", UserNamespace: true}, true},
		{"network class", networkTestConfig, classmount.Request{Handler: "nfs"}, false},
		{"user namespace given class mounts: idmap probe", networkTestConfig, classmount.Request{Handler: "plain", UserNamespace: true}, false},
		{"kubelet subPath mount", networkTestConfig, classmount.Request{Handler: "kata", Mounts: []oci.Mount{subPathMount}}, false},
		{"createBudget within the host check's own bound", "createBudget: 1s\n" + networkTestConfig, classmount.Request{Handler: "plain"}, false},
	} {
		p := NewPlugin(mustConfig(t, tt.config), true, &specmodtest.Host{}, quietLogger())
		if got := p.engine().cannotBlock(tt.req); got != tt.want {
			t.Errorf("%s: cannotBlock = %v, want %v", tt.name, got, tt.want)
		}
	}
}
