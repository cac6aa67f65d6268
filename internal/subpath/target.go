package subpath

import (
	"path/filepath"
	"strconv"
	"strings"
)

// Target is a kubelet subPath bind target: <kubeletRoot>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>.
type Target struct {
	Path, PodUID, Volume, Container string
	Index                           int
}

// subpathsDir is the directory below a pod's directory that holds its subPath bind targets.
const subpathsDir = "volume-subpaths"

// ParseTarget reports whether source is such a target. It is pure (no I/O): it takes the path
// as written, and rejects anything but a clean absolute path of exactly that depth below
// kubeletRoot, with no "." or ".." component and a decimal index as kubelet writes it.
//
// Its checks are in the order that rejects the other mounts of a container soonest: every
// mount of every container is asked about, and most are below pods/ too.
func ParseTarget(kubeletRoot, source string) (Target, bool) {
	root := filepath.Clean(kubeletRoot)
	prefix := root + "/pods/"
	if root == "/" {
		prefix = "/pods/"
	}
	rest, ok := strings.CutPrefix(source, prefix)
	if !ok {
		return Target{}, false
	}
	// <uid>/volume-subpaths/<volume>/<container>/<index>: cut, not split, so that the other
	// mounts below pods/ (every container has some) cost no allocation.
	var parts [5]string
	for i := range parts[:4] {
		if parts[i], rest, ok = strings.Cut(rest, "/"); !ok || i == 1 && parts[1] != subpathsDir {
			return Target{}, false
		}
	}
	if parts[4] = rest; strings.Contains(rest, "/") {
		return Target{}, false
	}
	if !filepath.IsAbs(kubeletRoot) || !filepath.IsAbs(source) || source != filepath.Clean(source) {
		return Target{}, false
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return Target{}, false
		}
	}
	index, err := strconv.Atoi(parts[4])
	if err != nil || index < 0 || strconv.Itoa(index) != parts[4] {
		return Target{}, false
	}
	return Target{Path: source, PodUID: parts[0], Volume: parts[2], Container: parts[3], Index: index}, true
}

// rel is the target's path below the pod's volume-subpaths directory.
func (t Target) rel() string {
	return t.Volume + "/" + t.Container + "/" + strconv.Itoa(t.Index)
}
