package specmod

import (
	"errors"
	"fmt"
	"path"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-tools/generate"
)

// Edits is everything mountkeeper changes in one container's spec.
type Edits struct {
	Mounts []Mount
}

// Host answers the questions about the host that decide whether a mount can be made as asked:
// does the source exist, is the mount it lies on shared or slave. hostmount.Checker is the real
// one; tests pass a table.
type Host interface {
	// CheckSources returns an error per mount that cannot be made, each wrapped in a MountError.
	CheckSources(mounts []Mount) error
}

// Verify refuses edits that cannot be made exactly as asked: two mounts on one destination, a
// destination the container already has a mount on (mountkeeper never replaces a mount
// silently: the runtime would drop the pod's own volume), or a host side that is missing or
// does not propagate as asked. It reports every problem, not just the first. Each mount must
// have passed Mount.Validate already (a config's class mounts do, at load): Verify checks only
// what depends on the container and the host.
func (e Edits) Verify(existing []oci.Mount, host Host) error {
	// The host is asked from this small frame, not from the one that holds the maps: the
	// check goes deep, on a request's young goroutine stack.
	valid, errs := e.verifyMounts(existing)
	if host != nil && len(valid) > 0 {
		errs = append(errs, host.CheckSources(valid))
	}
	return errors.Join(errs...)
}

// verifyMounts returns the mounts that pass every check without the host, and the errors of
// the others.
func (e Edits) verifyMounts(existing []oci.Mount) (valid []Mount, errs []error) {
	type mnt struct{ dst, src string }
	have := make(map[string]mnt, len(existing))
	for _, m := range existing {
		have[CleanDestination(m.Destination)] = mnt{m.Destination, m.Source}
	}
	seen := make(map[string]bool, len(e.Mounts))
	valid = make([]Mount, 0, len(e.Mounts))
	for _, m := range e.Mounts {
		var err error
		ex, taken := have[CleanDestination(m.Destination)]
		switch {
		case seen[m.Destination]:
			err = errors.New("another class mount already uses this destination")
		case taken:
			err = fmt.Errorf("the container already has a mount at %s (source %q): remove it from the pod spec or choose another destination for the class mount", ex.dst, ex.src)
		}
		seen[m.Destination] = true
		if err != nil {
			errs = append(errs, &MountError{Mount: m, Err: err})
			continue
		}
		valid = append(valid, m)
	}
	return valid, errs
}

// CleanDestination is the container path a runtime mounts dst at: runtimes resolve a
// destination relative to the container's root, so "/data/", "/data/.", "//data" and "data"
// are all /data. Every comparison of destinations goes through it.
func CleanDestination(dst string) string {
	if !strings.HasPrefix(dst, "/") {
		dst = "/" + dst
	}
	return path.Clean(dst)
}

func hasDestination(mounts []oci.Mount, dst string) bool {
	dst = CleanDestination(dst)
	for _, m := range mounts {
		if CleanDestination(m.Destination) == dst {
			return true
		}
	}
	return false
}

// RootfsPropagation is the rootfs propagation a container needs for mounts to propagate as
// asked, given what the spec already has: rshared mounts need an rshared rootfs, rslave mounts
// at least rslave. It mirrors what the runtimes do for Kubernetes mount propagation, so a spec
// edited by `render` or the precreate hook behaves like one edited through NRI.
func RootfsPropagation(current string, mounts []Mount) string {
	want := current
	for _, m := range mounts {
		switch {
		case m.Propagation == Shared:
			want = string(Shared)
		case m.Propagation == Slave && want != string(Shared) && want != string(Slave):
			want = string(Slave)
		}
	}
	return want
}

// Apply adds the mounts to spec, orders all mounts so a parent is mounted before what lies
// below it, and raises the rootfs propagation where a mount needs it. It does not check the
// host: call Verify first. It refuses a destination the spec already has.
func (e Edits) Apply(spec *oci.Spec) error {
	for _, m := range e.Mounts {
		if hasDestination(spec.Mounts, m.Destination) {
			return &MountError{Mount: m, Err: fmt.Errorf("the spec already has a mount at %s", m.Destination)}
		}
	}
	if len(e.Mounts) == 0 {
		return nil
	}
	g := generate.NewFromSpec(spec)
	for _, m := range e.Mounts {
		g.AddMount(m.OCI())
	}
	sortMounts(spec.Mounts)
	current := ""
	if spec.Linux != nil {
		current = spec.Linux.RootfsPropagation
	}
	if want := RootfsPropagation(current, e.Mounts); want != current {
		if err := g.SetLinuxRootPropagation(want); err != nil {
			return fmt.Errorf("set rootfs propagation %s: %w", want, err)
		}
	}
	return nil
}
