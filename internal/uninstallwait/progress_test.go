package uninstallwait

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAssess: done only once the controller has seen the DaemonSet and every pod it wants is
// Ready; a pod held by a refusing init container is named with its node and what it said.
func TestAssess(t *testing.T) {
	ds := func(gen, observed int64, desired, ready int) DaemonSet {
		var d DaemonSet
		d.Metadata.Generation, d.Status.ObservedGeneration = gen, observed
		d.Status.DesiredNumberScheduled, d.Status.NumberReady = desired, ready
		return d
	}
	pod := func(text string) Pod {
		var p Pod
		if err := json.Unmarshal([]byte(text), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	readyPod := pod(`{"metadata":{"name":"u-1"},"spec":{"nodeName":"n1"},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}`)
	refused := pod(`{"metadata":{"name":"u-2"},"spec":{"nodeName":"n2"},"status":{"phase":"Pending","conditions":[{"type":"Ready","status":"False"}],
	  "initContainerStatuses":[
	    {"name":"runtime-unconfigure","restartCount":0,"state":{"terminated":{"exitCode":0}}},
	    {"name":"node-cleanup","restartCount":2,"state":{"waiting":{"reason":"CrashLoopBackOff"}},
	     "lastState":{"terminated":{"exitCode":1,"message":"node cleanup: 1 kept: pid 42 (sh) in cgroup /k8s.io/abc has it at /data\n"}}}]}}`)
	for _, tc := range []struct {
		name    string
		ds      DaemonSet
		pods    []Pod
		done    bool
		pending []string
	}{
		{"not seen by the controller yet (status all zero)", ds(1, 0, 0, 0), nil, false, nil},
		{"no node to run on", ds(1, 1, 0, 0), nil, true, nil},
		{"every node done", ds(1, 1, 1, 1), []Pod{readyPod}, true, nil},
		{"a pod not created yet", ds(1, 1, 2, 1), []Pod{readyPod}, false, nil},
		{"a node refuses", ds(1, 1, 2, 1), []Pod{readyPod, refused}, false, []string{
			"node n2 (pod u-2, Pending): node-cleanup is waiting (CrashLoopBackOff), tried 3 times; last run exited 1: node cleanup: 1 kept: pid 42 (sh) in cgroup /k8s.io/abc has it at /data"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Assess(tc.ds, tc.pods)
			if p.Done != tc.done || strings.Join(p.Pending, "|") != strings.Join(tc.pending, "|") {
				t.Errorf("Assess = done %v, pending %q; want done %v, pending %q", p.Done, p.Pending, tc.done, tc.pending)
			}
		})
	}
}
