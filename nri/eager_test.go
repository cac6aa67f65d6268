package nri

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// recordingMounter is a fakeMounter that also logs Hold and Release in order, with the spec
// held.
type recordingMounter struct {
	*fakeMounter
	mu    sync.Mutex
	calls []string
}

func (r *recordingMounter) Hold(s netspec.Spec, user string) {
	r.mu.Lock()
	r.calls = append(r.calls, "hold:"+s.Source+":"+user)
	r.mu.Unlock()
	r.fakeMounter.Hold(s, user)
}

func (r *recordingMounter) Release(user string) {
	r.mu.Lock()
	r.calls = append(r.calls, "release:"+user)
	r.mu.Unlock()
	r.fakeMounter.Release(user)
}

func (r *recordingMounter) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *recordingMounter) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = nil
}

const eagerConfig = `
runtimeClasses:
  nfs:
    networkMount: eager
    mounts:
      - {type: nfs, source: "filer:/export", destination: /data}
  lazy:
    mounts:
      - {type: nfs, source: "filer:/lazy", destination: /data}
`

func TestEagerClassesAreMountedAtStartAndKept(t *testing.T) {
	fm := &fakeMounter{users: map[string]bool{}}
	rec := &recordingMounter{fakeMounter: fm}
	p := NewPlugin(mustConfig(t, eagerConfig), true, &specmodtest.Host{}, quietLogger(), WithMounter(
		func(*configs.Config) (Mounter, error) { return rec, nil }))
	if _, err := p.Configure(context.Background(), "", "test", "1"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.log(), " "); got != "hold:filer:/export:mountkeeper:eager" {
		t.Errorf("at start: %s; want the eager class's mount held, the on-demand one untouched", got)
	}
	// Synchronize's ReleaseUnused leaves held mounts alone (netmount); a RemoveContainer
	// releases a container ID, never the eager user.
	p.RemoveContainer(context.Background(), nil, &api.Container{Id: "c1"})
	if got := strings.Join(rec.log()[1:], " "); got != "release:c1" {
		t.Errorf("RemoveContainer: %s, want only its container released", got)
	}

	// A reload that makes the class on-demand lets its mount go (grace period).
	rec.reset()
	if err := p.Reload(mustConfig(t, strings.Replace(eagerConfig, "networkMount: eager", "networkMount: onDemand", 1))); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.log(), " "); got != "release:mountkeeper:eager" {
		t.Errorf("after the reload: %s; want the eager user released and nothing held", got)
	}
}

func TestMountOptionIsValidated(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"runtimeClasses:\n  c:\n    networkMount: always\n    mounts: [{type: nfs, source: \"f:/e\", destination: /d}]\n", `networkMount "always": use onDemand`},
		{"runtimeClasses:\n  c:\n    networkMount: eager\n    mounts: [{source: /srv, destination: /d}]\n", "networkMount: eager is for classes with network filesystem mounts"},
	} {
		if _, err := configs.Parse([]byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want %q", tt.yaml, err, tt.want)
		}
	}
}
