package nodecleanup

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
)

// Facts is what the cleanup plans from: what the node holds below the state directory, read
// before anything is changed.
type Facts struct {
	Dir     string               // the state directory, its symlinks resolved
	Network []netmount.HostMount // the network mounts directly below Dir/mounts
	// Mounts are the mounts at or below Dir (mountinfo): the network mounts, the copy tree,
	// mounts/ and staging/ bound onto themselves, and whatever else is there.
	Mounts []*mountinfo.Info
	// Holders are the other mount namespaces' holds on the devices of the network mounts and
	// of the copy tmpfs.
	Holders map[string][]Holder
	// Entries is what Dir holds, by name (listState).
	Entries []entry
	// Scopes: a scoper is there to look for the mounts' leftover scopes with.
	Scopes bool
}

// copiesDir is where the agent keeps its subPath copies: a tmpfs (nri/plugin.go).
func copiesDir(stateDir string) string { return filepath.Join(stateDir, "subpath") }

// gather reads the facts for the state directory dir (symlinks resolved). It changes nothing.
func gather(dir string, holders Holders) (Facts, error) {
	f := Facts{Dir: dir}
	var err error
	if f.Network, err = netmount.HostMounts(dir); err != nil {
		return f, err
	}
	if f.Mounts, err = mountinfo.GetMounts(mountinfo.PrefixFilter(dir)); err != nil {
		return f, fmt.Errorf("read mountinfo: %w", err)
	}
	var devices []string
	for _, hm := range f.Network {
		devices = append(devices, hm.Device)
	}
	devices = append(devices, copyDevices(f.Mounts, copiesDir(dir))...)
	if f.Holders, err = holders.Holders(devices); err != nil {
		return f, fmt.Errorf("find the containers that use the mounts: %w", err)
	}
	if f.Entries, err = listState(dir); err != nil {
		return f, err
	}
	return f, nil
}

// device is a mount's device as mountinfo shows it (major:minor): the same in every mount
// namespace that holds the filesystem.
func device(m *mountinfo.Info) string { return fmt.Sprintf("%d:%d", m.Major, m.Minor) }

// listState reads what the state directory dir holds (Lstat: no link followed) and, in each
// directory of the layout that holds names of its own, what that holds.
func listState(dir string) ([]entry, error) {
	return listIn(dir, ".", stateLayout)
}

func listIn(root, rel string, layout []owned) ([]entry, error) {
	ents, err := os.ReadDir(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	out := make([]entry, 0, len(ents))
	for _, de := range ents {
		e := entry{Rel: filepath.Join(rel, de.Name()), Type: de.Type()}
		if o, ok := match(layout, e); ok && o.dir && o.inside != nil {
			if e.Children, err = listIn(root, e.Rel, o.inside); err != nil {
				return nil, err
			}
		}
		out = append(out, e)
	}
	return out, nil
}
