package netmount

import (
	"slices"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// stateVersion is the format of the state files this agent writes. Each agent writes its
// version into every state file, so that a later agent knows which spec a mount was made
// for even where the way specs are keyed or rendered has changed since (see recordsSpec):
//
//	0 (no "version" field; the agents that did not yet adopt mounts left by an earlier
//	  agent): the spec as mounted, without the FUSE default options (netspec), whose
//	  introduction changed the key of every fuse.* mount; secrets in clear in the oldest
//	  such files, redacted in later ones.
//	1: adds version and key (netspec.Spec.Key, secrets included); the spec redacted.
const stateVersion = 1

// state is what StateDir/state/<dir>.json holds about the host mount at StateDir/mounts/<dir>,
// where dir is the key the mount was made under. It is written once the mount is live and
// removed once it is unmounted. The spec here is redacted (netspec.Spec.Redacted), for people,
// logs and matching only: no secret is kept in clear. The file is 0600 in a 0700 directory
// all the same.
type state struct {
	Version   int       `json:"version"`
	Key       string    `json:"key,omitempty"` // netspec.Spec.Key of the spec, by the writer's rules
	Type      string    `json:"type"`
	Source    string    `json:"source"`
	Options   []string  `json:"options"`
	HostPath  string    `json:"hostPath"`
	MountedAt time.Time `json:"mountedAt"`
}

// newState is the state of a mount of s at hostPath, as this agent writes it.
func newState(s netspec.Spec, hostPath string) state {
	r := s.Redacted()
	return state{Version: stateVersion, Key: s.Key(), Type: r.Type, Source: r.Source, Options: r.Options,
		HostPath: hostPath, MountedAt: time.Now().UTC()}
}

// spec is the spec the state names, redacted: for logs and matching only.
func (st state) spec() netspec.Spec {
	return netspec.Spec{Type: st.Type, Source: st.Source, Options: st.Options}
}

// recordsSpec says whether the state, found for the mount at mounts/<dir>, records a mount of
// w, by the rules of the version that wrote it (the migration of an older state):
//
//	1: the key it records is w's key (exact: secrets count, though the file holds them
//	   redacted).
//	0: dir, the key a version 0 agent gave the mount, is the key of w as a version 0 config
//	   would have written it: w itself, or w without the FUSE default options this agent
//	   adds to a fuse.* mount, which version 0 did not add. The keys are computed
//	   the same way since.
//
// A state of an unknown later version (a downgrade) is read as this version's.
func (st state) recordsSpec(dir string, w netspec.Spec) bool {
	if st.Version >= 1 {
		return st.Key != "" && st.Key == w.Key()
	}
	return slices.Contains(keysBeforeFUSEDefaults(w), dir)
}

// keysBeforeFUSEDefaults are the keys w had before the FUSE default options: its own, and
// that of each spec that netspec.WithFUSEDefaults makes w of (w without the default options
// at its end).
func keysBeforeFUSEDefaults(w netspec.Spec) []string {
	keys := []string{w.Key()}
	for n := len(w.Options) - 1; n >= 0 && n >= len(w.Options)-len(netspec.FUSEDefaultOptions); n-- {
		before := netspec.Spec{Type: w.Type, Source: w.Source, Options: w.Options[:n:n]}
		if slices.Equal(netspec.WithFUSEDefaults(before.Type, before.Options), w.Options) {
			keys = append(keys, before.Key())
		}
	}
	return keys
}
