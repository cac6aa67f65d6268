//go:build !cgo

package hook

import (
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/specmod"
)

// Without cgo there is no constructor to enter a namespace: the mount stages must say so
// instead of failing obscurely.
func TestNamespaceMounterWithoutCgo(t *testing.T) {
	err := NamespaceMounter{}.MountInContainer(Request{Pid: 1, Rootfs: "/r", Mounts: []specmod.Mount{{Source: "/s", Destination: "/d", Propagation: specmod.Private}}})
	want := "this mountkeeper was built without cgo (CGO_ENABLED=0), so it cannot enter a container's mount namespace: rebuild it with CGO_ENABLED=1"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
}
