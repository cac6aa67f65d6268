// Command mountkeeper-runtime is the OCI runtime of mountkeeper's runtime classes (package
// runtimewrap): `mountkeeper runtime configure` names a link to it as the class handler's
// binary (containerd's BinaryName, CRI-O's runtime_path). It refuses a container the
// mountkeeper NRI plugin did not handle and otherwise becomes the node's own runtime with the
// same arguments. The runtime starts it for every runtime call of the class's containers
// (create, start, state, kill, delete, exec, ...), so it links only the guard's check: no NRI,
// ttrpc, protobuf or Prometheus, and no cgo.
package main

import (
	"os"

	"github.com/mountkeeper/mountkeeper/internal/runtimewrap"
)

func main() {
	os.Exit(runtimewrap.Main(os.Args, os.Stderr, runtimewrap.OS{}))
}
