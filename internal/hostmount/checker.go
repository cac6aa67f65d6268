package hostmount

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// DefaultTimeout bounds one CheckSources. A source on a dead network server makes stat hang in
// the kernel; the request must fail in time instead (the NRI runtime drops a plugin's changes
// when it answers late), so the checks run aside and are abandoned after the timeout.
const DefaultTimeout = time.Second

// Checker checks the host side of class mounts. It implements specmod.Host.
type Checker struct {
	in      Inspector
	timeout time.Duration
	cache   *factCache // nil: every check asks the host
}

// NewChecker returns a Checker that reads the host through in, giving up after DefaultTimeout.
func NewChecker(in Inspector) *Checker { return &Checker{in: in, timeout: DefaultTimeout} }

// WithTimeout returns a copy of c that gives up after d; d <= 0 runs the checks inline, for a
// caller that bounds its whole request itself.
func (c *Checker) WithTimeout(d time.Duration) *Checker {
	return &Checker{in: c.in, timeout: d, cache: c.cache}
}

// WithCache returns a copy of c that remembers the sources that passed until the live host
// changes (factCache). Only for an Inspector that reads the live host.
func (c *Checker) WithCache() (*Checker, error) {
	ch, err := newChanges()
	if err != nil {
		return nil, err
	}
	return &Checker{in: c.in, timeout: c.timeout, cache: &factCache{ch: ch, uniqueIDs: mounttable.UniqueIDs(), ok: map[factKey]uint64{}}}, nil
}

var _ specmod.Host = (*Checker)(nil)

// CheckSources returns one MountError per mount whose source is missing or whose host mount
// point does not propagate as the mount's propagation needs; each says how to fix it.
func (c *Checker) CheckSources(mounts []specmod.Mount) error {
	var gen uint64
	if c.cache != nil {
		var hit bool
		if hit, gen = c.cache.hit(mounts); hit {
			return nil
		}
	}
	type checked struct {
		cacheable bool
		ids       map[string]uint64
	}
	r, err := bounded.Do(bounded.Default, c.timeout, checkKey(mounts), "check the host side of "+describeMounts(mounts), func() (checked, error) {
		// Watch before checking, so that a change during the check is not missed.
		cacheable := c.cache != nil && c.cache.watchAll(mounts)
		ids, err := c.checkSources(mounts)
		return checked{cacheable, ids}, err
	})
	if err == nil && r.cacheable {
		c.cache.store(mounts, r.ids, gen)
	}
	return err
}

// checkKey keys a check by its sources, so that a source below a dead filesystem holds at most
// one stuck check (one OS thread) however often containers using it are created; concurrent
// checks of the same mounts share one call.
func checkKey(mounts []specmod.Mount) bounded.Key {
	k := bounded.Key{Paths: make([]string, len(mounts))}
	var call strings.Builder
	for i, m := range mounts {
		k.Paths[i] = m.Source
		m.Describe(&call)
		call.WriteByte('\n')
	}
	k.Call = "hostmount " + call.String()
	return k
}

func describeMounts(mounts []specmod.Mount) string {
	var b strings.Builder
	for i, m := range mounts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(m.Source)
	}
	return b.String()
}

// checkSources checks mounts and returns the unique ID of the host mount holding each
// propagating source (where the kernel has one).
func (c *Checker) checkSources(mounts []specmod.Mount) (map[string]uint64, error) {
	var errs []error
	var propagating []specmod.Mount
	for _, m := range mounts {
		if err := c.checkExists(m.Source); err != nil {
			errs = append(errs, &specmod.MountError{Mount: m, Err: err})
			continue
		}
		if propagates(m) {
			propagating = append(propagating, m)
		}
	}
	if len(propagating) == 0 {
		return nil, errors.Join(errs...)
	}
	paths := make([]string, len(propagating))
	for i, m := range propagating {
		paths[i] = m.Source
	}
	mps, err := c.in.MountPoints(paths)
	if err != nil {
		return nil, errors.Join(append(errs, fmt.Errorf("find the host mount points of %v: %w", paths, err))...)
	}
	ids := make(map[string]uint64, len(propagating))
	for i, m := range propagating {
		if err := checkPropagation(m.Propagation, mps[i]); err != nil {
			errs = append(errs, &specmod.MountError{Mount: m, Err: err})
		}
		ids[m.Source] = mps[i].UniqueID
	}
	return ids, errors.Join(errs...)
}

func (c *Checker) checkExists(src string) error {
	_, err := c.in.Stat(src)
	var se *SymlinkError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return fmt.Errorf("source %s: %w: mountkeeper does not follow symlinks in a source (a container that can write to a parent directory could point it anywhere on the host): use the real path as the source, or remove the symlink", src, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("source %s does not exist on the host: create it, or correct source in the runtime class", src)
	}
	return fmt.Errorf("source %s cannot be checked: %w", src, err)
}

// checkPropagation applies the kernel's rule: a mount propagates to a container's rslave copy
// only if it is shared or slave itself, and both ways (rshared) only if it is shared.
func checkPropagation(p specmod.Propagation, mp MountPoint) error {
	switch {
	case p == specmod.Slave && !mp.Shared && !mp.Slave:
		return fmt.Errorf("host mount point %s holding the source is private, but %s (%s) needs it shared or slave: run \"mount --make-rshared %s\" on the host (or make it rslave)",
			mp.Path, p, p.KubernetesName(), mp.Path)
	case p == specmod.Shared && !mp.Shared:
		return fmt.Errorf("host mount point %s holding the source is %s, but %s (%s) needs it shared: run \"mount --make-rshared %s\" on the host",
			mp.Path, mp.Propagation(), p, p.KubernetesName(), mp.Path)
	}
	return nil
}
