package hostmount

import (
	"sync"

	"github.com/mountkeeper/mountkeeper/mounttable"
	"github.com/mountkeeper/mountkeeper/specmod"
)

// factCache remembers the sources (with the propagation they were checked for) that passed the
// host check, until the host may have changed (changes): then it forgets them all. A container
// of a class whose sources passed, on a node whose mount table and source directories did not
// change since, costs one poll(2), plus for an rslave or rshared source one statmount(2) by
// mount ID, instead of a bounded check. The propagation is read again each time because the
// kernel does not tell mountinfo pollers about propagation changes (mount --make-private);
// statmount by ID resolves no path, so it cannot hang on a dead filesystem.
type factCache struct {
	ch *changes

	mu  sync.Mutex
	gen uint64            // bumped whenever the facts are forgotten
	ok  map[string]uint64 // fact key -> unique ID of the propagating source's mount (0: none)
}

func factKey(m specmod.Mount) string { return string(m.Propagation) + "\x00" + m.Source }

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
	for _, m := range mounts {
		id, ok := c.ok[factKey(m)]
		if !ok || !propagatesNow(m, id) {
			return false, gen
		}
	}
	return true, gen
}

// propagatesNow says whether m's source mount, known by its unique ID, still propagates as m
// needs; a mount without a unique ID cannot be asked, so it is not cached as passed.
func propagatesNow(m specmod.Mount, id uint64) bool {
	if m.Propagation != specmod.Slave && m.Propagation != specmod.Shared {
		return true
	}
	if id == 0 {
		return false
	}
	shared, slave, err := mounttable.PropagationByID(id)
	if err != nil {
		return false
	}
	return checkPropagation(m.Propagation, MountPoint{Shared: shared, Slave: slave}) == nil
}

// watchAll watches every source's path before its check (inside the bounded call: it may hang
// on a dead filesystem); it says whether all of them can be cached.
func (c *factCache) watchAll(mounts []specmod.Mount) bool {
	for _, m := range mounts {
		if ok, err := c.ch.watch(m.Source); err != nil || !ok {
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
		c.ok[factKey(m)] = ids[m.Source]
	}
}
