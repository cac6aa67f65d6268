//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/guard"
	"github.com/mountkeeper/mountkeeper/internal/runtimeconfig"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

// TestGuardWhilePluginAway: a runtime configured by `mountkeeper runtime configure` never
// starts a container of a class without its class mounts, even while the plugin is away, and
// runs everything else: a class container created while the plugin is stopped is refused at
// start with mountkeeper's message, a default container runs, and once the plugin is back the
// class container gets its mounts. A second `runtime configure` changes nothing. On containerd
// and on CRI-O (which had no guard before the runtime wrapper).
func TestGuardWhilePluginAway(t *testing.T) {
	for _, kind := range []harness.RuntimeKind{harness.KindContainerd, harness.KindCRIO} {
		t.Run(string(kind), func(t *testing.T) { guardWhilePluginAway(t, kind) })
	}
}

// TestClassSpecIsRuntimeDefault: a class container gets containerd's own default spec: its
// config.json equals that of the same container in a pod of no class, except the class mounts
// and the plugin's mark (IDs, names and the sandbox's PID normalised).
func TestClassSpecIsRuntimeDefault(t *testing.T) {
	n := newNode(t, harness.KindContainerd, nil, guardConfig)
	if err := os.MkdirAll(filepath.Join(n.src(), "guarded"), 0o755); err != nil {
		t.Fatal(err)
	}
	n.runtimeCommand("configure")
	if err := n.rt.Restart(n.ctx); err != nil {
		t.Fatal(err)
	}
	cri := n.rt.CRI()
	// spec starts the same container in a pod of handler and returns its config.json with
	// what differs between any two containers replaced by placeholders.
	spec := func(handler, podName string) map[string]any {
		t.Helper()
		var id, pod string
		deadline := time.Now().Add(30 * time.Second)
		for {
			var err error
			pod, err = cri.RunPod(n.ctx, harness.PodOptions{Name: podName, UID: podName + "-uid", RuntimeHandler: handler})
			if err != nil {
				t.Fatal(err)
			}
			id, err = cri.CreateContainer(n.ctx, pod, harness.ContainerOptions{Name: "app"})
			if err == nil {
				err = cri.StartContainer(n.ctx, id)
			}
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal(err) // the plugin never connected after the restart
			}
			podName += "x"
			time.Sleep(500 * time.Millisecond)
		}
		data, err := n.ctrd.TaskSpec(id)
		if err != nil {
			t.Fatal(err)
		}
		// The next pod takes the same name (and so the same log paths, hostname, ...).
		if err := cri.RemovePod(n.ctx, pod); err != nil {
			t.Fatal(err)
		}
		text := strings.NewReplacer(id, "<container>", pod, "<sandbox>", podName+"-uid", "<uid>", podName, "<pod>").Replace(string(data))
		text = regexp.MustCompile(`/proc/[0-9]+/ns/`).ReplaceAllString(text, "/proc/<pid>/ns/")
		var doc map[string]any
		if err := json.Unmarshal([]byte(text), &doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	plain := spec("", "spec-pod")
	class := spec("mk-guard", "spec-pod")

	// What the class container has and the default one must not: its class mount and the mark.
	annotations := class["annotations"].(map[string]any)
	if annotations[guard.Annotation] == nil {
		t.Errorf("the class container carries no mark: %v", annotations)
	}
	delete(annotations, guard.Annotation)
	var mounts, classMounts []any
	for _, m := range class["mounts"].([]any) {
		if m.(map[string]any)["destination"] == "/guarded" {
			classMounts = append(classMounts, m)
			continue
		}
		mounts = append(mounts, m)
	}
	class["mounts"] = mounts
	if len(classMounts) != 1 {
		t.Errorf("the class container has class mounts %v, want one at /guarded", classMounts)
	}
	t.Logf("the class container's config.json differs from the default one's by: the mount %v and the annotation %s", classMounts, guard.Annotation)
	// NRI sorts a container's mounts by path depth whenever a plugin adds one (its
	// generator's AdjustMounts); the runtime's own mounts are the same set.
	if !reflect.DeepEqual(class["mounts"], plain["mounts"]) {
		t.Logf("mount order differs (NRI sorts the mounts of a container a plugin adds mounts to by depth); compared as sets")
		byDestination(class["mounts"].([]any))
		byDestination(plain["mounts"].([]any))
	}
	if !reflect.DeepEqual(class, plain) {
		a, _ := json.MarshalIndent(plain, "", "  ")
		b, _ := json.MarshalIndent(class, "", "  ")
		t.Errorf("the class container's config.json differs from the default container's beyond the class mounts and the mark:\n%s",
			runtimeconfig.UnifiedDiff("default", "class", a, b))
	}
}

// TestRuntimeUnconfigure: configure, run a class container, remove it, unconfigure: the
// runtime's config files and the install dir are byte for byte (mode included) as before
// configure, and the restarted runtime runs a container of no class.
func TestRuntimeUnconfigure(t *testing.T) {
	for _, kind := range []harness.RuntimeKind{harness.KindContainerd, harness.KindCRIO} {
		t.Run(string(kind), func(t *testing.T) {
			n := newGuardedNode(t, kind)
			before := n.runtimeFiles()
			n.runtimeCommand("configure")
			if reflect.DeepEqual(n.runtimeFiles(), before) {
				t.Fatal("configure changed no file")
			}
			if err := n.rt.Restart(n.ctx); err != nil {
				t.Fatal(err)
			}
			cri := n.rt.CRI()
			deadline := time.Now().Add(30 * time.Second)
			for i := 0; ; i++ {
				pod, err := cri.RunPod(n.ctx, harness.PodOptions{RuntimeHandler: "mk-guard"})
				if err != nil {
					t.Fatal(err)
				}
				id, err := cri.CreateContainer(n.ctx, pod, harness.ContainerOptions{})
				if err == nil {
					err = cri.StartContainer(n.ctx, id)
				}
				if err == nil {
					// While a class pod runs, unconfigure refuses and names its process:
					// the runtime could not stop it without the wrapper.
					out, uerr := exec.Command(n.bin, append([]string{"runtime", "unconfigure"}, n.configureArgs()...)...).CombinedOutput()
					if uerr == nil || !strings.Contains(string(out), "remove the class pods first") || !strings.Contains(string(out), "runs "+filepath.Join(n.dir, "install", "class", "mk-guard")) {
						t.Errorf("unconfigure with a class pod running: %v\n%s", uerr, out)
					}
					t.Logf("unconfigure with a class pod running: %s", out)
				}
				// Every class pod goes before unconfigure, the refused attempts' too (their
				// sandboxes run through the wrapper).
				if rerr := cri.RemovePod(n.ctx, pod); rerr != nil {
					t.Fatal(rerr)
				}
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("class container: %v", err)
				}
				time.Sleep(500 * time.Millisecond)
			}
			t.Logf("runtime unconfigure: %s", n.runtimeCommand("unconfigure"))
			if after := n.runtimeFiles(); !reflect.DeepEqual(after, before) {
				for p, s := range after {
					if before[p] != s {
						t.Errorf("%s after unconfigure: %q, before configure: %q", p, s, before[p])
					}
				}
				for p, s := range before {
					if _, ok := after[p]; !ok {
						t.Errorf("%s is gone (was %q)", p, s)
					}
				}
			}
			if err := n.rt.Restart(n.ctx); err != nil {
				t.Fatal(err)
			}
			pod, err := cri.RunPod(n.ctx, harness.PodOptions{})
			if err != nil {
				t.Fatal(err)
			}
			id, err := cri.CreateContainer(n.ctx, pod, harness.ContainerOptions{})
			if err == nil {
				err = cri.StartContainer(n.ctx, id)
			}
			if err != nil {
				t.Errorf("a container of no class after unconfigure: %v", err)
			}
		})
	}
}
