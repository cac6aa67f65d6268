package nodecleanup

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/mountkeeper/mountkeeper/internal/guard"
)

// What mountkeeper writes in its state directory, by name: the cleanup removes these and
// nothing else. An operator may keep other files there (or the stateDir may be a directory
// shared with something else); those stay, are named, and so does every directory that holds
// one. The names are those of their writers:
//
//   - lock: netmount.LockStateDir, the flock every agent holds while it runs;
//   - guard.key, its temporary guard.key.<n> and guard.key.lock (its writers' lock, in newer
//     versions): guard.LoadOrCreateKey;
//   - guard-refusals, guard-refusals.lock and guard-refusals.<n>: guard.RecordRefusal, the
//     guard's refusal counts (the runtime wrapper and the OCI hook write them);
//   - subpath-live.json and subpath-live.json.tmp: the live subPath copies (nri/live.go,
//     internal/subpath followstate.go);
//   - subpath/: the copies' tmpfs mount point, with the pods' tmpfs mounts on it (nri/plugin.go,
//     copies.PrepareCopyDir, copies' tmpfs.go);
//   - mounts/<key>/, state/<key>.json (and .<key>.<n>.tmp), secrets/<key> (and
//     .secret.<n>.tmp), locks/<key>.lock and locks/mounts.lock, staging/<key>.<n>/ and
//     staging/<key>.hook<pid>/: the network mounts (internal/netmount), <key> being
//     netspec.Spec.Key, 16 hex digits.
//
// A name mountkeeper makes as a regular file or a directory is its only if it is one: a
// symbolic link in its place (mountkeeper makes none) is foreign, and is never followed.

// owned is one name of the layout.
type owned struct {
	name *regexp.Regexp
	dir  bool
	// inside are the names a directory holds; nil: it holds nothing of mountkeeper's (a mount
	// point: after its unmount it is empty).
	inside []owned
}

const (
	key = `[0-9a-f]{16}`
	num = `[0-9]+` // os.CreateTemp's random part
)

func file(pattern string) owned { return owned{name: regexp.MustCompile(`^(?:` + pattern + `)$`)} }

func dir(pattern string, inside ...owned) owned {
	return owned{name: regexp.MustCompile(`^(?:` + pattern + `)$`), dir: true, inside: inside}
}

// stateLayout is the state directory's layout.
var stateLayout = []owned{
	file(lockFile),
	file(regexp.QuoteMeta(guard.KeyFile) + `(?:\.lock|\.` + num + `)?`),
	file(regexp.QuoteMeta(guard.RefusalsFile) + `(?:\.lock|\.` + num + `)?`),
	file(`subpath-live\.json(?:\.tmp)?`),
	dir(`subpath`),
	dir(`mounts`, dir(key)),
	dir(`state`, file(key+`\.json`), file(`\.`+key+`\.`+num+`\.tmp`)),
	dir(`secrets`, file(key), file(`\.secret\.`+num+`\.tmp`)),
	dir(`locks`, file(key+`\.lock`), file(`mounts\.lock`)),
	dir(`staging`, dir(key+`\.(?:`+num+`|hook`+num+`)`)),
}

// entry is a name found in the state directory (Lstat: a link is a link), with, for a
// directory of the layout that holds names of its own, what it holds.
type entry struct {
	Rel      string // below the state directory
	Type     fs.FileMode
	Children []entry
}

// match is the name of the layout e is, if any.
func match(layout []owned, e entry) (owned, bool) {
	name := filepath.Base(e.Rel)
	for _, o := range layout {
		if o.name.MatchString(name) && (o.dir && e.Type == fs.ModeDir || !o.dir && e.Type.IsRegular()) {
			return o, true
		}
	}
	return owned{}, false
}

// sweep decides, for what the state directory holds, what goes and what stays: remove lists
// the removals in their order (a directory after what it holds; ".", the state directory
// itself, last); foreign are the entries that are not mountkeeper's. A directory that
// holds a foreign entry is not removed.
func sweep(entries []entry) (remove []removal, foreign []string) {
	var walk func(layout []owned, entries []entry) bool
	walk = func(layout []owned, entries []entry) (empty bool) {
		empty = true
		for _, e := range entries {
			o, ok := match(layout, e)
			if !ok {
				foreign = append(foreign, e.Rel)
				empty = false
				continue
			}
			if o.dir && !walk(o.inside, e.Children) {
				empty = false
				continue
			}
			remove = append(remove, removal{Rel: e.Rel, Dir: o.dir})
		}
		return empty
	}
	empty := walk(stateLayout, entries)
	// The lock goes last: while it is there, an agent that starts meanwhile waits for it.
	if i := slices.IndexFunc(remove, func(r removal) bool { return r.Rel == lockFile }); i >= 0 {
		lock := remove[i]
		remove = append(slices.Delete(remove, i, i+1), lock)
	}
	if empty {
		remove = append(remove, removal{Rel: ".", Dir: true})
	}
	return remove, foreign
}

// lockFile is the state directory's lock (netmount.LockStateDir).
const lockFile = "lock"

// removal is one name to remove below the state directory.
type removal struct {
	Rel string
	Dir bool
}
