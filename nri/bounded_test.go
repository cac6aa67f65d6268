package nri

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/internal/hostmount"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// deadInspector is a host whose every stat hangs, like one below a FUSE mount whose daemon
// never answers.
type deadInspector struct{ release chan struct{} }

func (d deadInspector) Stat(string) (fs.FileInfo, error) { <-d.release; return nil, nil }
func (d deadInspector) MountPoints(p []string) ([]hostmount.MountPoint, error) {
	<-d.release
	return make([]hostmount.MountPoint, len(p)), nil
}

// TestCreateContainerOnADeadSourceStaysBounded: 1,000 CreateContainer calls for a class whose
// source never answers all fail in time, and leave a bounded number of goroutines behind
// (each stuck one holds an OS thread on a real dead filesystem), not one per call.
func TestCreateContainerOnADeadSourceStaysBounded(t *testing.T) {
	in := deadInspector{release: make(chan struct{})}
	defer close(in.release)
	p := NewPlugin(mustConfig(t, "runtimeClasses:\n  fast:\n    mounts: [{source: /fuse/dead, destination: /d}]\n"), true, newHostChecker(in), quietLogger())
	pod := &api.PodSandbox{Name: "pod", Namespace: "ns", RuntimeHandler: "fast"}
	before := runtime.NumGoroutine()
	start := time.Now()
	for i := range 1000 {
		_, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app", Id: fmt.Sprint("c", i)})
		if err == nil || !strings.Contains(err.Error(), "check the host side of /fuse/dead: no answer within 1s") {
			t.Fatalf("CreateContainer %d: %v", i, err)
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("1000 CreateContainer calls took %s: only the first should wait for the dead source", took)
	}
	time.Sleep(100 * time.Millisecond) // let finished request goroutines exit
	if after := runtime.NumGoroutine(); after > before+5 {
		t.Errorf("goroutines grew from %d to %d over 1000 CreateContainer calls on a dead source", before, after)
	}
}

// panickyHost panics in its check.
type panickyHost struct{}

func (panickyHost) CheckSources([]specmod.Mount) error { panic("checker bug") }

// TestCreateContainerRecoversAPanic: a panic while deciding refuses the container and is
// logged with its stack; the plugin lives on.
func TestCreateContainerRecoversAPanic(t *testing.T) {
	var logs bytes.Buffer
	log := logrus.New()
	log.SetOutput(&logs)
	p := NewPlugin(mustConfig(t, testConfig), true, panickyHost{}, log)
	pod := &api.PodSandbox{Name: "pod", Namespace: "ns", RuntimeHandler: "fast"}
	_, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app", Id: "c1"})
	want := `mountkeeper: runtime class "fast", container ns/pod/app: internal error: panic: checker bug: refused rather than created without its mounts`
	if err == nil || err.Error() != want {
		t.Errorf("CreateContainer with a panicking check\ngot:  %v\nwant: %s", err, want)
	}
	if !strings.Contains(logs.String(), "panic: checker bug") || !strings.Contains(logs.String(), "goroutine") {
		t.Errorf("the panic and its stack are not logged:\n%s", logs.String())
	}
}
