package idmap

import (
	"io"
	"os"

	"github.com/mountkeeper/mountkeeper/internal/reexec"
)

// userNSPlaceholder is the reexec entry NewUserNS starts in a user namespace of its own: it
// holds the namespace until its stdin closes, then says placeholderDone and exits, so that
// NewUserNS knows the entry ran and not the binary's main. A binary that links this package
// dispatches to it from main (reexec.Init).
const (
	userNSPlaceholder = "mountkeeper-userns-placeholder"
	placeholderDone   = "held\n"
)

func init() {
	reexec.Register(userNSPlaceholder, func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		_, _ = os.Stdout.WriteString(placeholderDone)
	})
}
