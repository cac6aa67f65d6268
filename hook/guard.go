package hook

import (
	"io"
	"os"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/guard"
)

// Guard is the createRuntime hook that `mountkeeper runtime configure` installs for each runtime
// class: it refuses a container that the NRI plugin did not handle (package guard), so that a
// container of the class never starts without its class mounts while the plugin is away. It
// reads only the OCI state and the node's guard key: it mounts nothing, needs no config, and
// answers in milliseconds. handler names the class (containerd puts no handler into the spec).
func Guard(stdin io.Reader, handler, stateDir string) error {
	data, err := readAllLimited(stdin, "the OCI state from stdin")
	if err != nil {
		return err
	}
	state, err := ParseState(data)
	if err != nil {
		return err
	}
	if err := guard.Admit(stateDir, state.ID, state.Annotations); err != nil {
		guard.CountRefusal(stateDir, configs.ClassName(handler), err, os.Stderr)
		return engine.Refuse(handler, containerOf(state.ID, state.Annotations), err)
	}
	return nil
}
