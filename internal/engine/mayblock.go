package engine

import (
	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/hostmount"
	"github.com/mountkeeper/mountkeeper/internal/subpath"
)

// blockFacts is what MayBlock needs to know of the engine's config, worked out once per engine
// (Engine.blockFacts) instead of per container.
type blockFacts struct {
	// hostBounded: the host check bounds itself (hostmount.DefaultTimeout) below createBudget.
	hostBounded bool
	classes     map[string]classFacts
}

// classFacts is what MayBlock needs to know of a class.
type classFacts struct {
	mounts  bool // the class has mounts (to idmap in a container with a user namespace)
	network bool // one of them is a network filesystem
}

func newBlockFacts(cfg *configs.Config) *blockFacts {
	f := &blockFacts{hostBounded: hostmount.DefaultTimeout < cfg.CreateBudget,
		classes: make(map[string]classFacts, len(cfg.RuntimeClasses))}
	for name, rc := range cfg.RuntimeClasses {
		c := classFacts{mounts: len(rc.Mounts) > 0}
		for _, m := range rc.Mounts {
			c.network = c.network || m.Network != nil
		}
		f.classes[name] = c
	}
	return f
}

// blockFacts returns the facts of e's config, working them out at the first call.
func (e *Engine) blockFacts() *blockFacts {
	e.blockOnce.Do(func() { e.blocking = newBlockFacts(e.Config) })
	return e.blocking
}

// MayBlock says the decision for r may hold more than one step that can wait on the host. One
// that cannot holds only the host check, which bounds itself (hostmount.DefaultTimeout) below
// createBudget: no kubelet subPath mount, no network filesystem in the class, and no idmap
// probe (the second bounded step of a container with a user namespace given class mounts).
// A front end runs a decision that cannot block on the request's goroutine; any other on one
// of its own under createBudget, so that the sum of its bounded steps can never keep the
// runtime waiting past its plugin timeout.
func (e *Engine) MayBlock(r Request) bool {
	f := e.blockFacts()
	if !f.hostBounded {
		return true
	}
	for _, m := range r.Mounts {
		if _, sub := subpath.ParseTarget(e.Config.KubeletRoot, m.Source); sub {
			return true
		}
	}
	c := f.classes[configs.ClassName(r.Handler)]
	// With a user namespace, the idmap probe is a second bounded step.
	return c.network || r.UserNamespace && c.mounts
}
