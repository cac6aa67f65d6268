package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// hungCopies never answers (a copy below a dead filesystem) until release is closed, and
// records what was removed.
type hungCopies struct {
	release chan struct{}
	removed []string
}

func (h *hungCopies) CopySources(context.Context, string, []string) ([]copies.Copy, []string, []subpath.Fallback) {
	<-h.release
	return nil, nil, nil
}

func (h *hungCopies) Remove(id string) error {
	h.removed = append(h.removed, id)
	return nil
}

// TestSubPathCheckThatDoesNotFinish: a subPath check that overruns subPathCopies.timeout
// keeps every subPath as kubelet bound it (timeout fallbacks), removes the container's
// copies, and does not refuse the container, of a class or not.
func TestSubPathCheckThatDoesNotFinish(t *testing.T) {
	cfg, err := configs.Parse([]byte("subPathCopies: {timeout: 10ms}\n" + testConfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, handler := range []string{"plain", "kata"} {
		t.Run(handler, func(t *testing.T) {
			copies := &hungCopies{release: make(chan struct{})}
			defer close(copies.release)
			e := &engine.Engine{Config: cfg, Host: &specmodtest.Host{}, SubPaths: &fakeSubPaths{}, SubPathCopies: copies}
			d, err := e.Decide(context.Background(), engine.Request{Handler: handler, Container: ctr, Mounts: kubeletMounts})
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if len(d.Fallbacks) != 1 || d.Fallbacks[0].Target.Path != subPathTarget || d.Fallbacks[0].Reason != subpath.ReasonTimeout {
				t.Fatalf("fallbacks %+v, want one timeout fallback for %s", d.Fallbacks, subPathTarget)
			}
			if !errors.Is(d.Fallbacks[0].Err, bounded.ErrNoAnswer) {
				t.Errorf("fallback cause %v, want the bounded wait's ErrNoAnswer", d.Fallbacks[0].Err)
			}
			if !slices.Equal(copies.removed, []string{ctr.ID}) {
				t.Errorf("removed copies of %q, want %q", copies.removed, ctr.ID)
			}
			if len(d.Copies) != 0 || len(d.Repairs) != 0 {
				t.Errorf("copies %v, repairs %v after a check that did not finish", d.Copies, d.Repairs)
			}
		})
	}
}
