package guard

import (
	"errors"
	"fmt"
)

// Admit says why container id, whose spec carries annotations, must not start (nil: the plugin
// marked it). It reads the node's key from stateDir. The causes it returns are the guard's
// user-facing texts, shared by every front end (the createRuntime hook and the runtime wrapper);
// callers wrap them in the refusal format (engine.Refuse).
func Admit(stateDir, id string, annotations map[string]string) error {
	key, err := LoadKey(stateDir)
	if err != nil {
		return fmt.Errorf("mountkeeper has not handled any container on this node yet (%w), so this one would start without its class mounts: check that the mountkeeper NRI plugin runs and is connected to the runtime (systemctl status mountkeeper, or the mountkeeper DaemonSet pod); the container is retried once it is", err)
	}
	if !Valid(key, id, annotations[Annotation]) {
		return errNotHandled
	}
	return nil
}

var errNotHandled = errors.New("the mountkeeper NRI plugin did not handle this container (was it down or not yet connected when the container was created?), so it would start without its class mounts: check that the plugin runs and is connected to the runtime (systemctl status mountkeeper, or the mountkeeper DaemonSet pod); kubelet retries the container, and once the plugin is back the retry gets its mounts")
