package nri

import (
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// TestCannotBlock: a decision runs on the request's goroutine only when the host check is its
// one step that can wait on the host, and that check bounds itself below createBudget.
func TestCannotBlock(t *testing.T) {
	subPathMount := oci.Mount{Source: "/var/lib/kubelet/pods/uid/volume-subpaths/vol/app/0", Destination: "/cfg"}
	for _, tt := range []struct {
		name, config string
		req          engine.Request
		want         bool
	}{
		{"bind class", networkTestConfig, engine.Request{Handler: "plain"}, true},
		{"no class", networkTestConfig, engine.Request{Handler: "kata", UserNamespace: true}, true},
		{"network class", networkTestConfig, engine.Request{Handler: "nfs"}, false},
		{"user namespace given class mounts: idmap probe", networkTestConfig, engine.Request{Handler: "plain", UserNamespace: true}, false},
		{"kubelet subPath mount", networkTestConfig, engine.Request{Handler: "kata", Mounts: []oci.Mount{subPathMount}}, false},
		{"createBudget within the host check's own bound", "createBudget: 1s\n" + networkTestConfig, engine.Request{Handler: "plain"}, false},
	} {
		p := NewPlugin(mustConfig(t, tt.config), true, &specmodtest.Host{}, quietLogger())
		if got := p.engine().cannotBlock(tt.req); got != tt.want {
			t.Errorf("%s: cannotBlock = %v, want %v", tt.name, got, tt.want)
		}
	}
}
