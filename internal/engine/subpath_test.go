package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"

	oci "github.com/opencontainers/runtime-spec/specs-go"
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

func (h *hungCopies) Copyable([]string) []subpath.Target { return nil }

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

// madeCopies copies every source it is given to a path of its own, and records copies and
// removals.
type madeCopies struct {
	made    []string
	removed []string
}

func (m *madeCopies) CopySources(_ context.Context, _ string, sources []string) ([]copies.Copy, []string, []subpath.Fallback) {
	var cps []copies.Copy
	for _, s := range sources {
		cps = append(cps, copies.Copy{Target: subpath.Target{Path: s}, Path: "/run/copies/pod/" + filepath.Base(s)})
		m.made = append(m.made, s)
	}
	return cps, nil, nil
}

func (m *madeCopies) Copyable(sources []string) []subpath.Target {
	var out []subpath.Target
	for _, s := range sources {
		out = append(out, subpath.Target{Path: s})
	}
	return out
}

func (m *madeCopies) Remove(id string) error {
	m.removed = append(m.removed, id)
	return nil
}

// TestSubPathCopiesOfUserNamespacedContainers: a container with a user namespace gets its
// copies only where the kernel can idmap the copy tmpfs (Linux >= 6.3); elsewhere no copy is
// made and its subPaths keep kubelet's bind (repaired if stale), each a fallback that says
// why, and the container is not refused. A container without one keeps its copies
// whatever the kernel.
func TestSubPathCopiesOfUserNamespacedContainers(t *testing.T) {
	cfg, err := configs.Parse([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	copyPath := "/run/copies/pod/0"
	// A pod of its own: the bounded check of another test's hung copy of kubeletMounts may
	// still hold their key.
	target := "/var/lib/kubelet/pods/uid-2/volume-subpaths/cfg/app/0"
	mounts := []oci.Mount{{Source: target, Destination: "/etc/app.conf"}}
	for _, tc := range []struct {
		name             string
		userns, idmaps   bool
		copied, fellBack bool
	}{
		{"user namespace, tmpfs idmapped", true, true, true, false},
		{"user namespace, tmpfs not idmapped (before 6.3)", true, false, false, true},
		{"no user namespace, tmpfs not idmapped", false, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cps, repairs, ids := &madeCopies{}, &fakeSubPaths{}, &fakeIdmap{noTmpfs: !tc.idmaps}
			e := &engine.Engine{Config: cfg, Host: &specmodtest.Host{}, SubPaths: repairs, SubPathCopies: cps, Idmap: ids}
			d, err := e.Decide(context.Background(), engine.Request{Handler: "plain", Container: ctr, Mounts: mounts, UserNamespace: tc.userns})
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := len(d.Copies) == 1 && d.Copies[0].Path == copyPath; got != tc.copied {
				t.Errorf("copies %+v, want a copy: %t", d.Copies, tc.copied)
			}
			if !tc.fellBack {
				if len(d.Fallbacks) != 0 || len(cps.removed) != 0 {
					t.Errorf("fallbacks %v, removed %v; want none", d.Fallbacks, cps.removed)
				}
				return
			}
			if len(d.Fallbacks) != 1 || d.Fallbacks[0].Target.Path != target ||
				!strings.Contains(d.Fallbacks[0].Error(), "cannot idmap the copy's tmpfs (Linux 6.3 or newer can)") ||
				!strings.Contains(d.Fallbacks[0].Error(), "kubelet's bind") {
				t.Errorf("fallbacks %v, want one for %s saying the copy tmpfs cannot be idmapped", d.Fallbacks, target)
			}
			if len(cps.made) != 0 || !slices.Equal(repairs.sources, []string{target}) {
				t.Errorf("copied %q, repaired %q; want no copy made and %s repaired in place", cps.made, repairs.sources, target)
			}
		})
	}
}
