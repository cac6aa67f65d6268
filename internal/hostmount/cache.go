package hostmount

import (
	"slices"
	"sync"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// factCache remembers the sources (with the propagation they were checked for) that passed the
// host check, until the host may have changed (changes): then it forgets them all. A container
// of a class whose sources passed, on a node whose mount table and source directories did not
// change since, costs one poll(2), plus for an rslave or rshared source one statmount(2) by
// mount ID (one per host mount: sources on the same mount share it), instead of a bounded
// check. The propagation is read again each time because the kernel does not tell mountinfo
// pollers about propagation changes (mount --make-private); statmount by ID resolves no path,
// so it cannot hang on a dead filesystem.
type factCache struct {
	ch        *changes
	uniqueIDs bool // the kernel has unique mount IDs (mounttable.UniqueIDs)

	mu  sync.Mutex
	gen uint64             // bumped whenever the facts are forgotten
	ok  map[factKey]uint64 // unique ID of the propagating source's mount (0: none)
}

// factKey is one fact: the source passed for the propagation.
type factKey struct {
	propagation specmod.Propagation
	source      string
}

func keyOf(m specmod.Mount) factKey { return factKey{m.Propagation, m.Source} }

// sync forgets every fact if the host changed; it returns the generation in force. Callers
// hold c.mu.
func (c *factCache) sync() uint64 {
	if c.ch.changed() {
		c.gen++
		clear(c.ok)
	}
	return c.gen
}

// hit says whether every mount's source passed since the host last changed; gen is the
// generation to hand to store after a check.
func (c *factCache) hit(mounts []specmod.Mount) (hit bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gen = c.sync()
	var buf [4]MountPoint
	asked := buf[:0] // what statmount said in this call, by UniqueID
	for _, m := range mounts {
		id, ok := c.ok[keyOf(m)]
		if !ok {
			return false, gen
		}
		if !propagates(m) {
			continue
		}
		var mp MountPoint
		if mp, asked, ok = propagationNow(id, asked); !ok || checkPropagation(m.Propagation, mp) != nil {
			return false, gen
		}
	}
	return true, gen
}

// propagates says whether m's source must sit on a mount that propagates (rslave, rshared).
func propagates(m specmod.Mount) bool {
	return m.Propagation == specmod.Slave || m.Propagation == specmod.Shared
}

// propagationNow is the current propagation of the mount with unique ID id, from asked (the
// answers of this hit) or one statmount(2), which it adds to asked. ok is false for a mount
// without a unique ID, which cannot be asked (so its sources are never cached as passed), and
// where statmount fails.
func propagationNow(id uint64, asked []MountPoint) (_ MountPoint, _ []MountPoint, ok bool) {
	if id == 0 {
		return MountPoint{}, asked, false
	}
	for _, mp := range asked {
		if mp.UniqueID == id {
			return mp, asked, true
		}
	}
	shared, slave, err := mounttable.PropagationByID(id)
	if err != nil {
		return MountPoint{}, asked, false
	}
	mp := MountPoint{UniqueID: id, Shared: shared, Slave: slave}
	return mp, append(asked, mp), true
}

// watchAll watches every source's path before its check (inside the bounded call: it may hang
// on a dead filesystem); it says whether all of them can be cached. Without unique mount IDs
// (Linux < 6.8) a propagating source's check cannot be (see propagationNow), so nothing is
// watched for any source of such a check: there the walk reads mountinfo at each mount on the
// way up, most of such a check's cost, for nothing.
func (c *factCache) watchAll(mounts []specmod.Mount) bool {
	if !c.uniqueIDs && slices.ContainsFunc(mounts, propagates) {
		return false
	}
	watched := make(map[string]int32, 8)
	for _, m := range mounts {
		if ok, err := c.ch.watch(m.Source, watched); err != nil || !ok {
			return false
		}
	}
	return true
}

// store records mounts as passed, unless the host changed since generation gen: a change
// during the check may have made its answer stale.
func (c *factCache) store(mounts []specmod.Mount, ids map[string]uint64, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sync() != gen {
		return
	}
	for _, m := range mounts {
		c.ok[keyOf(m)] = ids[m.Source]
	}
}
