package netmount

import (
	"slices"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// stateVersion is the format of the state files this agent writes. Each agent writes its
// version into every state file, so that a later agent knows which spec a mount was made
// for even where the way specs are keyed or rendered has changed since (see candidates):
//
//	0 (no "version" field; agents before issue 24, a155699 among them): the spec as mounted,
//	  without the FUSE default options of issue 17, which changed the key of every fuse.*
//	  mount; secrets in clear before ee67526, redacted since.
//	1: adds version and key; the spec redacted.
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

// candidates are the specs, redacted, that a config of this agent's would write for the
// mount the state describes: the migration of an older state to this agent's rules. A
// version 0 state's spec lacks the FUSE default options that this agent adds to a fuse.*
// mount unless its config turns them off: either is what the operator's unchanged config
// means now. A state of an unknown later version (a downgrade) is taken as this version.
func (st state) candidates() []netspec.Spec {
	s := st.spec().Redacted() // a version 0 state may hold secrets in clear
	if st.Version >= 1 {
		return []netspec.Spec{s}
	}
	withDefaults := s
	withDefaults.Options = netspec.WithFUSEDefaults(s.Type, s.Options)
	if slices.Equal(withDefaults.Options, s.Options) {
		return []netspec.Spec{s}
	}
	return []netspec.Spec{s, withDefaults}
}

// stands says whether the state describes a mount of w, by the rules of the version that
// wrote it.
func (st state) standsFor(w netspec.Spec) bool {
	r := w.Redacted()
	for _, c := range st.candidates() {
		if c.Type == r.Type && c.Source == r.Source && slices.Equal(c.Options, r.Options) {
			return true
		}
	}
	return false
}
