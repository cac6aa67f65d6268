package subpath

import (
	"errors"
)

// RepairSources checks every container mount source that is a kubelet subPath bind target
// and repairs the stale ones. The check is O(1) per mount; only a stale one pays for more.
// It returns the repairs made and one error per subPath that is stale (or whose bind is gone)
// and could not be repaired: such a container must not start, or it would see an empty
// placeholder or a deleted file instead of its volume's content.
func (r *Repairer) RepairSources(sources []string) ([]Repair, error) {
	var repairs []Repair
	var errs []error
	for _, src := range sources {
		t, ok := ParseTarget(r.root, src)
		if !ok {
			continue
		}
		stale, err := r.Stale(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !stale {
			continue
		}
		rep, err := r.Repair(t)
		switch {
		case errors.Is(err, ErrNotStale):
			// A filesystem reporting st_nlink 0 for a live file (some FUSE filesystems):
			// Repair's closer look found nothing deleted, so the bind is good.
		case err != nil:
			errs = append(errs, err)
		default:
			repairs = append(repairs, rep)
		}
	}
	return repairs, errors.Join(errs...)
}
