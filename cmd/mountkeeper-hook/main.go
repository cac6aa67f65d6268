// Command mountkeeper-hook is mountkeeper's OCI runtime hook alone: `mountkeeper-hook <stage>`
// does what `mountkeeper hook <stage>` does, with the same flags; a leading "hook" is
// accepted too, so a hook entry written for the mountkeeper binary (runtime configure's guard
// hook: `mountkeeper hook guard ...`) runs unchanged with this binary as its path. A hook starts once per
// container, so its start-up is paid on every container start; this binary links only what
// the hook needs (no NRI, ttrpc, protobuf or Prometheus, and no cgo), which starts in about
// a third of the time the whole mountkeeper binary takes (docs/benchmarks.md).
package main

import (
	"os"

	"github.com/mountkeeper/mountkeeper/cmd/internal/cli"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/internal/reexec"
)

func main() {
	_ = netmount.MarkInheritedCloseOnExec() // inherited descriptors must not reach mount helpers
	if reexec.Init() {                      // idmap's placeholder, which the hook links
		return
	}
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "hook" {
		args = args[1:]
	}
	os.Exit(cli.ExitStatus(cli.RunHook("mountkeeper-hook", args, os.Stdin, os.Stdout, os.Stderr), os.Stderr))
}
