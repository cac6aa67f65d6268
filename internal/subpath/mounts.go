package subpath

import (
	"errors"
)

// RepairSources checks every container mount source that is a kubelet subPath bind target
// and repairs the stale ones. The check is O(1) per mount; only a stale one pays for more.
// It returns the repairs made and a Fallback for each stale bind it could not repair, which is
// left for the runtime to fail on, as without mountkeeper. The error is for the one case that
// refuses the container: a target that is not a mount point (ErrNotMounted). kubelet always
// binds before it creates a container, so that is mountkeeper's own doing (a repair that
// failed after it detached the stale bind, on a kernel older than 6.5): the container would
// get an empty placeholder instead of its volume's content, which it would not get without
// mountkeeper.
func (r *Repairer) RepairSources(sources []string) ([]Repair, []Fallback, error) {
	var repairs []Repair
	var fallbacks []Fallback
	var errs []error
	for _, src := range sources {
		t, ok := ParseTarget(r.root, src)
		if !ok {
			continue
		}
		stale, err := r.Stale(t)
		if err == nil && stale {
			var rep Repair
			if rep, err = r.Repair(t); err == nil {
				repairs = append(repairs, rep)
			}
		}
		switch {
		case err == nil, errors.Is(err, ErrNotStale):
			// Nothing to repair. ErrNotStale: a filesystem reporting st_nlink 0 for a live file
			// (some FUSE filesystems): Repair's closer look found nothing deleted.
		case errors.Is(err, ErrNotMounted):
			errs = append(errs, err)
		default:
			fallbacks = append(fallbacks, NewFallback(t, err))
		}
	}
	return repairs, fallbacks, errors.Join(errs...)
}
