package hook

import (
	"errors"
	"fmt"
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
	ctr := containerOf(state.ID, state.Annotations)
	key, err := guard.LoadKey(stateDir)
	if err != nil {
		recordRefusal(stateDir, handler, guard.ReasonNoKey)
		return engine.Refuse(handler, ctr, fmt.Errorf("mountkeeper has not handled any container on this node yet (%w), so this one would start without its class mounts: check that the mountkeeper NRI plugin runs and is connected to the runtime (systemctl status mountkeeper, or the mountkeeper DaemonSet pod); the container is retried once it is", err))
	}
	if !guard.Valid(key, state.ID, state.Annotations[guard.Annotation]) {
		recordRefusal(stateDir, handler, guard.ReasonNotHandled)
		return engine.Refuse(handler, ctr, errors.New("the mountkeeper NRI plugin did not handle this container (was it down or not yet connected when the container was created?), so it would start without its class mounts: check that the plugin runs and is connected to the runtime (systemctl status mountkeeper, or the mountkeeper DaemonSet pod); kubelet retries the container, and once the plugin is back the retry gets its mounts"))
	}
	return nil
}

// recordRefusal counts a refusal for the agent's metrics (guard.RecordRefusal). A refusal that
// cannot be counted is still a refusal: the failure goes to stderr, which the runtime logs
// beside the hook's error, and the container is refused all the same.
func recordRefusal(stateDir, handler, reason string) {
	if err := guard.RecordRefusal(stateDir, configs.ClassName(handler), reason); err != nil {
		fmt.Fprintf(os.Stderr, "mountkeeper guard: count the refusal: %v\n", err)
	}
}
