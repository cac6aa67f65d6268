package subpath

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The pure rules of a repair: each takes values and returns values.

// deletedSuffix is what the kernel's dentry_path appends to the path of an unlinked dentry,
// as statmount's mnt_root and mountinfo's field 4 show it: ".../app.conf//deleted". It follows
// the name directly: a name that ends with a space shows as "name //deleted" (in mountinfo
// "name\040//deleted"), so a " //deleted" suffix cannot be stripped without mangling such a
// name, and only "//deleted" is.
const deletedSuffix = "//deleted"

// staleRoot strips deletedSuffix from a mount's root; ok is false when the root is not marked
// deleted, i.e. the mount does not hold a deleted dentry.
func staleRoot(root string) (string, bool) {
	p, ok := strings.CutSuffix(root, deletedSuffix)
	if !ok || !path.IsAbs(p) {
		return "", false
	}
	return p, true
}

// within returns p's path below dir ("" when p is dir); ok is false when p is not dir or
// below it. Both must be clean absolute paths.
func within(dir, p string) (string, bool) {
	if !path.IsAbs(dir) || !path.IsAbs(p) || path.Clean(dir) != dir || path.Clean(p) != p {
		return "", false
	}
	switch {
	case p == dir:
		return "", true
	case dir == "/":
		return p[1:], true
	}
	if rel, ok := strings.CutPrefix(p, dir+"/"); ok {
		return rel, true
	}
	return "", false
}

// fsPath returns where p, a path as the process sees it, lies within its filesystem: the
// root of its mount plus the part of p below the mount point.
func fsPath(p, mountPoint, mountRoot string) (string, error) {
	rel, ok := within(mountPoint, p)
	if !ok {
		return "", fmt.Errorf("%s is not on the mount at %s", p, mountPoint)
	}
	if !path.IsAbs(mountRoot) || strings.HasSuffix(mountRoot, deletedSuffix) {
		return "", fmt.Errorf("the mount at %s has root %q, which is not a live path in its filesystem", mountPoint, mountRoot)
	}
	return path.Join(mountRoot, rel), nil
}

// volumeKinds names kubelet's plugin directories as a pod spec names the volume; atomic marks
// the volumes that kubelet's atomic writer fills (..<timestamp>/ and ..data); content is where
// the volume's files are below its directory, when not in it (a CSI volume is mounted on
// <volume>/mount).
var volumeKinds = map[string]struct {
	name    string
	atomic  bool
	content string
}{
	"kubernetes.io~configmap":    {name: "configMap", atomic: true},
	"kubernetes.io~secret":       {name: "secret", atomic: true},
	"kubernetes.io~downward-api": {name: "downwardAPI", atomic: true},
	"kubernetes.io~projected":    {name: "projected", atomic: true},
	"kubernetes.io~empty-dir":    {name: "emptyDir"},
	"kubernetes.io~host-path":    {name: "hostPath"},
	"kubernetes.io~csi":          {name: "csi", content: "mount"},
	"kubernetes.io~local-volume": {name: "local"},
	"kubernetes.io~nfs":          {name: "nfs"},
}

// atomicPlugins are the plugin directories of the atomic-writer volumes, sorted. kubelet names
// a volume's directory in them after the pod's volume, as it names volume-subpaths/<volume>.
var atomicPlugins = sync.OnceValue(func() []string {
	var ps []string
	for p, k := range volumeKinds {
		if k.atomic {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
})

// volumeContent is the path of a volume's files below <plugin>/<volume>: "" for most.
func volumeContent(plugin string) string { return volumeKinds[plugin].content }

// volumeKind names the kind of volume that plugin directory holds and whether the atomic
// writer fills it.
func volumeKind(plugin string) (kind string, atomic bool) {
	if k, ok := volumeKinds[plugin]; ok {
		return k.name, k.atomic
	}
	return strings.TrimPrefix(plugin, "kubernetes.io~"), false
}

// timestampDir matches the directories the atomic writer creates: "..2026_11_22_07_00_00.123".
// Compiled on first use, not at every start of the binary (see containerID).
var timestampDir = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\.\.[0-9]{4}_[0-9]{2}_[0-9]{2}_[0-9]{2}_[0-9]{2}_[0-9]{2}\.[0-9]+$`)
})

// Resolution says what to open inside the volume directory to find what a stale subPath
// named now.
type Resolution struct {
	Rel     string // relative to the volume directory
	SubPath string // the subPath kubelet resolved: the key for an atomic-writer volume
	Key     bool   // SubPath is a key of an atomic-writer volume
}

// planResolution turns the stale bind's path below the volume directory (remainder) into what
// to open now. For an atomic-writer volume the remainder is ..<timestamp>/<key> and the key is
// looked up through ..data; for any other volume the remainder is the subPath itself.
func planResolution(plugin, remainder string) (Resolution, error) {
	if err := relativeClean(remainder); err != nil {
		return Resolution{}, err
	}
	if _, atomic := volumeKind(plugin); !atomic {
		return Resolution{Rel: remainder, SubPath: remainder}, nil
	}
	ts, key, _ := strings.Cut(remainder, "/")
	if !timestampDir().MatchString(ts) {
		return Resolution{}, fmt.Errorf("%s is not inside a ..<timestamp> directory of the atomic writer", remainder)
	}
	return Resolution{Rel: path.Join("..data", key), SubPath: key, Key: true}, nil
}

// ThroughData turns rel, a path through the atomic writer's ..data link as planResolution
// makes it (..data/<key>, or ..data itself for subPath ..data), into the same path through the timestamp directory the link names
// (link, as read), so that it can be opened without following any symlink. The link must
// name a ..<timestamp> directory of the volume itself.
func ThroughData(rel, link string) (string, error) {
	key, ok := "", rel == "..data"
	if !ok {
		key, ok = strings.CutPrefix(rel, "..data/")
		if !ok || relativeClean(key) != nil {
			return "", fmt.Errorf("%q is not ..data nor a key below it", rel)
		}
	}
	if !timestampDir().MatchString(link) {
		return "", fmt.Errorf("..data points to %q, not to a ..<timestamp> directory of the volume", link)
	}
	return path.Join(link, key), nil
}

// relativeClean accepts a non-empty relative path with no empty, "." or ".." component.
func relativeClean(p string) error {
	if p == "" {
		return errors.New("empty path")
	}
	if path.IsAbs(p) {
		return fmt.Errorf("%s is absolute", p)
	}
	for c := range strings.SplitSeq(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("%q has a %q component", p, c)
		}
	}
	return nil
}

// pickVolume checks that exactly one volume directory of the pod (holders, relative to its
// volumes directory) holds held.
func pickVolume(held string, holders []string) error {
	switch len(holders) {
	case 1:
		return nil
	case 0:
		return fmt.Errorf("%s lies in no volume directory of the pod (a hostPath, or a volume kubelet keeps elsewhere): %w", held, ErrUnknownVolume)
	}
	sorted := slices.Sorted(slices.Values(holders))
	return fmt.Errorf("%s lies in %d volume directories of the pod (%s), so which volume it is is unclear: %w",
		held, len(sorted), strings.Join(sorted, ", "), ErrUnknownVolume)
}

// sameType checks that what a subPath names now is of the type the stale bind was.
func sameType(stale, now uint32) error {
	if stale&unix.S_IFMT == now&unix.S_IFMT {
		return nil
	}
	return fmt.Errorf("it is a %s now, but the stale bind was a %s", TypeName(now), TypeName(stale))
}

// TypeName names the file type of mode for messages ("regular file", "fifo").
func TypeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return fmt.Sprintf("file of type %#o", mode&unix.S_IFMT)
}

// describe names a subPath for messages: "key app.conf of configMap volume cfg".
func describe(kind, volume string, r Resolution) string {
	if r.Key {
		return fmt.Sprintf("key %s of %s volume %s", r.SubPath, kind, volume)
	}
	return fmt.Sprintf("subPath %s of %s volume %s", r.SubPath, kind, volume)
}

// resolveFailure explains why opening what a subPath names now failed, from openat2's error.
func resolveFailure(kind, volume string, r Resolution, err error) string {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		if r.Key {
			return fmt.Sprintf("key %s is no longer in %s volume %s", r.SubPath, kind, volume)
		}
		return fmt.Sprintf("subPath %s is no longer in %s volume %s", r.SubPath, kind, volume)
	case errors.Is(err, unix.EXDEV):
		return describe(kind, volume, r) + ` leads out of the volume (a symlink or ".." points outside); it was not followed`
	case errors.Is(err, unix.ELOOP):
		return describe(kind, volume, r) + " leads through a magic link or a symlink loop; it was not followed"
	}
	return "cannot open " + describe(kind, volume, r)
}

// needsPrivate says whether the new bind must be made private to propagate as the stale bind,
// kubelet's, did: a clone of a shared (or slave) volume mount comes out a peer (or slave) of
// it, as kubelet's own bind does; only where kubelet's bind was private is that undone. A
// shared kubelet bind (kubelet makes its root dir rshared) stays shared, since the runtime
// refuses an rslave or rshared container mount (HostToContainer, Bidirectional) of a private
// source. A slave kubelet bind whose clone is not a slave is left as it came: the right master
// cannot be chosen.
func needsPrivate(stale, now Mount) bool {
	return !stale.Shared && !stale.Slave && (now.Shared || now.Slave)
}

// isStale says whether statx's answer for a bind target shows a bind of a deleted inode: the
// root of a mount, with no link left.
func isStale(i Info) bool {
	return i.Nlink == 0 && (i.MountRoot || !i.MountRootKnown)
}

// ErrNotStale is wrapped by Repair's error when the target does not hold a deleted inode (any
// more): there is nothing to repair and the container can be created as it is.
var ErrNotStale = errors.New("the subPath mount is not stale")

// ErrNotMounted says a subPath bind target is not a mount point: the container would get
// kubelet's empty placeholder instead of the volume's content.
var ErrNotMounted = errors.New("the subPath bind target is not a mount point")

// Error says which stale subPath mount was not repaired, or which subPath was not copied
// (Copy), and why. Reason names the volume and subPath once they are known.
type Error struct {
	Target Target
	Reason string
	Err    error
	Copy   bool
}

func (e *Error) Error() string {
	what := "stale subPath mount %s (pod %s, container %s, volume %s) not repaired: %s"
	if e.Copy {
		what = "subPath mount %s (pod %s, container %s, volume %s) not copied: %s"
	}
	s := fmt.Sprintf(what, e.Target.Path, e.Target.PodUID, e.Target.Container, e.Target.Volume, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }
