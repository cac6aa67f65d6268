package harness

import (
	"context"
	"fmt"
)

// Runtime is a private CRI runtime with NRI: a Containerd or a CRIO. Tests that must hold on
// both take one and drive it only through this interface.
type Runtime interface {
	// Name is "containerd" or "crio" (a RuntimeKind), for subtest names and messages.
	Name() string
	// CRI is the runtime's CRI client; it stays valid across Restart.
	CRI() *Client
	// NRISocket is where external NRI plugins connect; empty unless Options.NRI is set.
	NRISocket() string
	// NRIPluginPath and NRIPluginConfigPath are where the runtime looks for pre-registered
	// plugins (NN-name, executable) and their configs (NN-name.conf).
	NRIPluginPath() string
	NRIPluginConfigPath() string
	// Restart stops the runtime with SIGTERM and starts it again with the same config;
	// containers keep running.
	Restart(ctx context.Context) error
	// Dir is the instance directory; LogPath the file collecting the daemon's output.
	Dir() string
	LogPath() string
	// Close removes everything the instance created (see Containerd.Close); nil-safe.
	Close() error
}

// RuntimeKind names a runtime the harness can start.
type RuntimeKind string

const (
	KindContainerd RuntimeKind = "containerd"
	KindCRIO       RuntimeKind = "crio"
)

// RuntimeKinds lists every runtime, for tests that run once per runtime.
var RuntimeKinds = []RuntimeKind{KindContainerd, KindCRIO}

// StartRuntime starts an instance of kind; see Start and StartCRIO. Like them it returns the
// (closed) instance together with an error, so `defer rt.Close()` is always safe.
func StartRuntime(ctx context.Context, kind RuntimeKind, opts Options) (Runtime, error) {
	switch kind {
	case KindContainerd:
		return Start(ctx, opts)
	case KindCRIO:
		return StartCRIO(ctx, opts)
	}
	return nil, fmt.Errorf("unknown runtime %q", kind)
}

// Binaries returns the paths of the binaries kind needs (for testenv.Require).
func (k RuntimeKind) Binaries() []string {
	dir := Options{}.binDir()
	var names []string
	switch k {
	case KindContainerd:
		names = []string{containerdBin, shimBin, ctrBin, runcBin}
	case KindCRIO:
		names = []string{crioBin, pinnsBin, runcBin}
	}
	var paths []string
	for _, n := range names {
		paths = append(paths, dir+"/"+n)
	}
	if k == KindCRIO {
		paths = append(paths, conmonPath, podmanPath)
	}
	return paths
}

var (
	_ Runtime = (*Containerd)(nil)
	_ Runtime = (*CRIO)(nil)
)
