// Package specmodtest holds the one fake of specmod.Host that every package's tests use: the
// mount-utils pattern of an interface (specmod.Host), its real implementation
// (hostmount.Checker) and a fake.
package specmodtest

import (
	"errors"
	"sync"

	"github.com/mountkeeper/mountkeeper/specmod"
)

// Host fails the sources in Fail with the given reason and records every source it was asked
// about, call by call. The zero value passes every source, and so does a nil *Host (a table test
// that leaves its host out). It is safe for concurrent use.
type Host struct {
	Fail map[string]string

	mu    sync.Mutex
	calls [][]string
}

var _ specmod.Host = (*Host)(nil)

// CheckSources fails each mount whose source is in Fail with a *specmod.MountError.
func (h *Host) CheckSources(ms []specmod.Mount) error {
	if h == nil {
		return nil
	}
	var asked []string
	var errs []error
	for _, m := range ms {
		asked = append(asked, m.Source)
		if why, ok := h.Fail[m.Source]; ok {
			errs = append(errs, &specmod.MountError{Mount: m, Err: errors.New(why)})
		}
	}
	h.mu.Lock()
	h.calls = append(h.calls, asked)
	h.mu.Unlock()
	return errors.Join(errs...)
}

// Calls returns the sources asked about, one slice per call.
func (h *Host) Calls() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]string(nil), h.calls...)
}

// Asked returns every source asked about, in order.
func (h *Host) Asked() []string {
	var all []string
	for _, c := range h.Calls() {
		all = append(all, c...)
	}
	return all
}
