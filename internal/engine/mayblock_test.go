package engine_test

import (
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// TestMayBlock: a decision runs on the request's goroutine only when the host check is its
// one step that can wait on the host, and that check bounds itself below createBudget.
func TestMayBlock(t *testing.T) {
	subPathMount := oci.Mount{Source: subPathTarget, Destination: "/etc/app.conf"}
	for _, tt := range []struct {
		name, config string
		req          engine.Request
		want         bool
	}{
		{"bind class", testConfig, engine.Request{Handler: "plain"}, false},
		{"no class", testConfig, engine.Request{Handler: "kata", UserNamespace: true}, false},
		{"network class", testConfig, engine.Request{Handler: "net"}, true},
		{"user namespace given class mounts: idmap probe", testConfig, engine.Request{Handler: "plain", UserNamespace: true}, true},
		{"kubelet subPath mount", testConfig, engine.Request{Handler: "kata", Mounts: []oci.Mount{subPathMount}}, true},
		{"createBudget within the host check's own bound", "createBudget: 1s\n" + testConfig, engine.Request{Handler: "plain"}, true},
	} {
		cfg, err := configs.Parse([]byte(tt.config))
		if err != nil {
			t.Fatalf("%s: parse test config: %v", tt.name, err)
		}
		e := &engine.Engine{Config: cfg, Host: &specmodtest.Host{}}
		if got := e.MayBlock(tt.req); got != tt.want {
			t.Errorf("%s: MayBlock = %v, want %v", tt.name, got, tt.want)
		}
	}
}
