package engine_test

import (
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

const mayBlockConfig = `
runtimeClasses:
  nfs:
    mounts:
      - {type: nfs, source: "filer:/export", destination: /data, propagation: HostToContainer, options: [vers=4.1]}
  plain:
    mounts:
      - {source: /srv/plain, destination: /plain}
`

// TestMayBlock: a decision runs on the request's goroutine only when the host check is its
// one step that can wait on the host, and that check bounds itself below createBudget.
func TestMayBlock(t *testing.T) {
	subPathMount := oci.Mount{Source: "/var/lib/kubelet/pods/uid/volume-subpaths/vol/app/0", Destination: "/cfg"}
	for _, tt := range []struct {
		name, config string
		req          engine.Request
		want         bool
	}{
		{"bind class", mayBlockConfig, engine.Request{Handler: "plain"}, false},
		{"no class", mayBlockConfig, engine.Request{Handler: "kata", UserNamespace: true}, false},
		{"network class", mayBlockConfig, engine.Request{Handler: "nfs"}, true},
		{"user namespace given class mounts: idmap probe", mayBlockConfig, engine.Request{Handler: "plain", UserNamespace: true}, true},
		{"kubelet subPath mount", mayBlockConfig, engine.Request{Handler: "kata", Mounts: []oci.Mount{subPathMount}}, true},
		{"createBudget within the host check's own bound", "createBudget: 1s\n" + mayBlockConfig, engine.Request{Handler: "plain"}, true},
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
