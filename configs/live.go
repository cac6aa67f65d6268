package configs

import "fmt"

// restartOnly are the settings a running agent cannot change: a reload that changes one is
// refused whole (CheckLiveChange), since applying the rest and not that one, or that one
// beside what depends on it elsewhere, would leave the node half in each.
var restartOnly = []struct {
	key   string
	value func(*Config) string
	why   string
}{
	{"stateDir", func(c *Config) string { return c.StateDir },
		"the runtime's guard (the mountkeeper-runtime entries and hooks `mountkeeper runtime configure` wrote) reads the guard key from the old one, and the network mounts and their lock stay there"},
}

// CheckLiveChange says why a running agent with config c cannot put next in force by a
// reload (nil: it can). The error names the setting, its two values and that a restart is
// needed.
func (c *Config) CheckLiveChange(next *Config) error {
	for _, s := range restartOnly {
		if was, is := s.value(c), s.value(next); was != is {
			return fmt.Errorf("%s changed from %q to %q, which a running agent cannot apply: %s. The whole reload is refused and %s stays %q; to move it, run `mountkeeper runtime configure` with the new config and restart the agent (and the runtime, as configure says)", s.key, was, is, s.why, s.key, was)
		}
	}
	return nil
}
