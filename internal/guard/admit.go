package guard

import (
	"errors"
	"fmt"
	"io"
)

// Refused is Admit's answer for a container that must not start. Its message is the guard's
// user-facing text, shared by every front end (the createRuntime hook and the runtime
// wrapper), which wraps it in the refusal format (engine.Refuse); Reason is one of Reasons,
// for the count the agent exports.
type Refused struct {
	Reason string
	cause  error
}

func (r *Refused) Error() string { return r.cause.Error() }
func (r *Refused) Unwrap() error { return r.cause }

// Admit says why container id, whose spec carries annotations, must not start (nil: the plugin
// marked it): a *Refused. It reads the node's key from stateDir.
func Admit(stateDir, id string, annotations map[string]string) error {
	key, err := LoadKey(stateDir)
	if err != nil {
		return &Refused{ReasonNoKey, fmt.Errorf("mountkeeper has not handled any container on this node yet (%w), so this one would start without its class mounts: check that the mountkeeper NRI plugin runs and is connected to the runtime (systemctl status mountkeeper, or the mountkeeper DaemonSet pod); the container is retried once it is", err)}
	}
	if !Valid(key, id, annotations[Annotation]) {
		return &Refused{ReasonNotHandled, errNotHandled}
	}
	return nil
}

var errNotHandled = errors.New("the mountkeeper NRI plugin did not handle this container (was it down or not yet connected when the container was created?), so it would start without its class mounts: check that the plugin runs and is connected to the runtime (systemctl status mountkeeper, or the mountkeeper DaemonSet pod); kubelet retries the container, and once the plugin is back the retry gets its mounts")

// CountRefusal records err, when it is a refusal of Admit, for class in stateDir
// (RecordRefusal), for the agent's metrics. A refusal that cannot be counted is still a
// refusal: the failure is written to w (the runtime logs the front end's stderr beside its
// error) and the container is refused all the same.
func CountRefusal(stateDir, class string, err error, w io.Writer) {
	var r *Refused
	if !errors.As(err, &r) {
		return
	}
	if err := RecordRefusal(stateDir, class, r.Reason); err != nil {
		fmt.Fprintf(w, "mountkeeper guard: count the refusal: %v\n", err)
	}
}
