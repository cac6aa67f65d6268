package specmod

import (
	"errors"
	"fmt"
	"path"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// Mount is one bind mount that mountkeeper adds to a container.
type Mount struct {
	Source      string // absolute host path
	Destination string // absolute path in the container
	Propagation Propagation
	ReadOnly    bool
	Options     []string // extra bind mount options (nosuid, nodev, noexec, ...)
	// Idmap maps the mount with the container's user namespace (the "idmap" option, which
	// runc >= 1.2 applies with the container's own mappings): files keep the owners they have
	// on the host, as kubelet's volumes do in a pod with hostUsers: false. Only the mount
	// itself is mapped, not mounts below it. Only for a container with a user namespace: runc
	// refuses the option on one without.
	Idmap bool
}

// String names a mount in logs and errors the way an operator reads a config: what goes where,
// and how.
func (m Mount) String() string {
	var b strings.Builder
	m.Describe(&b)
	return b.String()
}

// Describe writes m.String() to b, for a message naming many mounts.
func (m Mount) Describe(b *strings.Builder) {
	b.Grow(len(m.Source) + len(m.Destination) + len(m.Propagation) + 20)
	b.WriteString(m.Source)
	b.WriteString(" -> ")
	b.WriteString(m.Destination)
	b.WriteString(" (")
	b.WriteString(string(m.Propagation))
	if m.ReadOnly {
		b.WriteString(", ro")
	}
	if m.Idmap {
		b.WriteString(", idmap")
	}
	b.WriteByte(')')
}

// MountError ties a cause to the mount it concerns.
type MountError struct {
	Mount Mount
	Err   error
}

func (e *MountError) Error() string { return fmt.Sprintf("mount %s: %v", e.Mount, e.Err) }
func (e *MountError) Unwrap() error { return e.Err }

// bindOptions are the options a bind mount may carry besides propagation and ro. Anything else
// would be ignored by the kernel for a bind or mean a different kind of mount, so it is refused
// rather than passed on and silently dropped.
var bindOptions = map[string]bool{
	"nosuid": true, "suid": true, "nodev": true, "dev": true, "noexec": true, "exec": true,
	"noatime": true, "atime": true, "nodiratime": true, "diratime": true,
	"relatime": true, "norelatime": true, "strictatime": true, "nostrictatime": true,
}

// Validate checks a mount on its own, without the host: absolute clean paths, a known
// propagation, options that make sense for a bind. All problems are reported at once.
func (m Mount) Validate() error {
	var errs []error
	if err := ValidateSource(m.Source); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateDestination(m.Destination); err != nil {
		errs = append(errs, err)
	}
	if _, err := ParsePropagation(string(m.Propagation)); err != nil {
		errs = append(errs, err)
	}
	if err := validateOptions(m.Options); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ValidateSource checks a host path: absolute, and already clean, so what the config says is
// exactly what gets mounted.
func ValidateSource(src string) error {
	switch {
	case src == "":
		return errors.New("source is empty: name a host path")
	case !path.IsAbs(src):
		return fmt.Errorf("source %q is not an absolute path", src)
	case hasDotDot(src):
		return fmt.Errorf("source %q contains \"..\"", src)
	case path.Clean(src) != src:
		return fmt.Errorf("source %q is not clean: write %q", src, path.Clean(src))
	}
	return nil
}

// ValidateDestination checks a container path. Besides being absolute and clean it must not
// be "/" or lie in /proc or /sys, whose contents the runtime owns: a bind there would hide them.
func ValidateDestination(dst string) error {
	switch {
	case dst == "":
		return errors.New("destination is empty: name an absolute path in the container")
	case !path.IsAbs(dst):
		return fmt.Errorf("destination %q is relative: it must be an absolute path in the container", dst)
	case hasDotDot(dst):
		return fmt.Errorf("destination %q contains \"..\": it could leave the container's root", dst)
	case path.Clean(dst) != dst:
		return fmt.Errorf("destination %q is not clean: write %q", dst, path.Clean(dst))
	case dst == "/":
		return errors.New("destination \"/\" would hide the container's root filesystem")
	case within(dst, "/proc") || within(dst, "/sys"):
		return fmt.Errorf("destination %q is inside /proc or /sys, which the runtime mounts", dst)
	}
	return nil
}

func validateOptions(opts []string) error {
	var errs []error
	for _, o := range opts {
		switch {
		case isPropagationOption(o):
			errs = append(errs, fmt.Errorf("option %q sets propagation: use the propagation key instead", o))
		case o == "ro" || o == "rw":
			errs = append(errs, fmt.Errorf("option %q: use readOnly: true or false instead", o))
		case o == "bind" || o == "rbind":
			errs = append(errs, fmt.Errorf("option %q is implied: every class mount is a recursive bind", o))
		case !bindOptions[o]:
			errs = append(errs, fmt.Errorf("option %q is not a bind mount option (allowed: nosuid, nodev, noexec, noatime, nodiratime, relatime, strictatime and their negations)", o))
		}
	}
	return errors.Join(errs...)
}

// OCI returns the mount as the runtime takes it. The propagation option is always explicit:
// a runtime that generates the spec carries the previous mount's propagation over to a mount
// without one, which makes container creation fail (see CONTEXT.md, NRI facts).
func (m Mount) OCI() oci.Mount {
	opts := []string{"rbind", string(m.Propagation)}
	if m.ReadOnly {
		opts = append(opts, "ro")
	}
	opts = append(opts, m.Options...)
	if m.Idmap {
		opts = append(opts, "idmap")
	}
	return oci.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts}
}

func hasDotDot(p string) bool {
	for c := range strings.SplitSeq(p, "/") {
		if c == ".." {
			return true
		}
	}
	return false
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}
