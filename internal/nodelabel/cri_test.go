package nodelabel

import (
	"reflect"
	"testing"
)

// TestVerboseRuntimes: containerd 1.7 leaves runtime_handlers empty; its verbose status's CRI
// config names the runtimes it loaded.
func TestVerboseRuntimes(t *testing.T) {
	got := verboseRuntimes(`{"containerd": {"defaultRuntimeName": "runc", "runtimes": {"runc": {}, "mk-a": {"runtimeType": "io.containerd.runc.v2"}}}}`)
	if want := []string{"mk-a", "runc"}; !reflect.DeepEqual(got, want) {
		t.Errorf("verboseRuntimes = %v, want %v", got, want)
	}
	if got := verboseRuntimes("not json"); got != nil {
		t.Errorf("verboseRuntimes of garbage = %v, want none", got)
	}
}
