// Package uninstallwait is `mountkeeper node wait-uninstall`, the Helm chart's post-delete
// hook that waits until the uninstall DaemonSet has run `runtime unconfigure` and `node
// cleanup` on every node (its pods Ready), bounded in time, and otherwise names each node that
// has not finished and what its pod last said (a refusal names the container that still uses
// a mount). Helm waits for the hook's pod and prints its log when it fails. This file is the
// pure part: what the DaemonSet's status and pods say; api.go reads them.
package uninstallwait

import (
	"fmt"
	"slices"
	"strings"
)

// DaemonSet is the part of an apps/v1 DaemonSet the waiter reads.
type DaemonSet struct {
	Metadata struct {
		Generation int64 `json:"generation"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
	} `json:"spec"`
	Status struct {
		ObservedGeneration     int64 `json:"observedGeneration"`
		DesiredNumberScheduled int   `json:"desiredNumberScheduled"`
		NumberReady            int   `json:"numberReady"`
	} `json:"status"`
}

// Pod is the part of a v1 Pod the waiter reads.
type Pod struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase                 string            `json:"phase"`
		Conditions            []Condition       `json:"conditions"`
		InitContainerStatuses []ContainerStatus `json:"initContainerStatuses"`
		ContainerStatuses     []ContainerStatus `json:"containerStatuses"`
	} `json:"status"`
}

// Condition is a pod condition.
type Condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

// ContainerStatus is the part of a container's status the waiter reads.
type ContainerStatus struct {
	Name         string         `json:"name"`
	RestartCount int            `json:"restartCount"`
	State        ContainerState `json:"state"`
	LastState    ContainerState `json:"lastState"`
}

// ContainerState is one of a container's states.
type ContainerState struct {
	Waiting *struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"waiting"`
	Running    *struct{} `json:"running"`
	Terminated *struct {
		ExitCode int    `json:"exitCode"`
		Reason   string `json:"reason"`
		Message  string `json:"message"`
	} `json:"terminated"`
}

// Progress is how far the uninstall is.
type Progress struct {
	Done    bool
	Desired int // nodes the DaemonSet runs on
	Ready   int // of them, finished
	// Pending names, per node not finished, what its pod says (sorted by node).
	Pending []string
}

// Assess reads the DaemonSet's status (kept by the DaemonSet controller) and its pods. It is
// done once the controller has seen this DaemonSet and every pod it wants is Ready: a pod
// becomes Ready only after its init containers (unconfigure, cleanup) succeeded.
func Assess(ds DaemonSet, pods []Pod) Progress {
	p := Progress{Desired: ds.Status.DesiredNumberScheduled, Ready: ds.Status.NumberReady}
	seen := ds.Metadata.Generation > 0 && ds.Status.ObservedGeneration >= ds.Metadata.Generation
	for _, pod := range pods {
		if !ready(pod) {
			p.Pending = append(p.Pending, describe(pod))
		}
	}
	slices.Sort(p.Pending)
	p.Done = seen && p.Ready >= p.Desired && len(p.Pending) == 0
	return p
}

func ready(p Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// describe says of a pod not Ready what holds it: the first init container that has not
// succeeded, with what it said when it last ended (a refusal's message).
func describe(p Pod) string {
	node := p.Spec.NodeName
	if node == "" {
		node = "(not scheduled)"
	}
	head := fmt.Sprintf("node %s (pod %s, %s)", node, p.Metadata.Name, p.Status.Phase)
	for _, c := range p.Status.InitContainerStatuses {
		if t := c.State.Terminated; t != nil && t.ExitCode == 0 {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %s", head, c.Name)
		switch {
		case c.State.Running != nil:
			b.WriteString(" is running")
		case c.State.Waiting != nil:
			fmt.Fprintf(&b, " is waiting (%s)", c.State.Waiting.Reason)
		}
		if c.RestartCount > 0 {
			fmt.Fprintf(&b, ", tried %d times", c.RestartCount+1)
		}
		last := c.State.Terminated
		if last == nil {
			last = c.LastState.Terminated
		}
		if last != nil {
			fmt.Fprintf(&b, "; last run exited %d: %s", last.ExitCode, strings.TrimSpace(last.Message))
		}
		return b.String()
	}
	return head + ": not ready yet"
}
