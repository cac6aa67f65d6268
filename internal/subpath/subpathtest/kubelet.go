// Package subpathtest imitates kubelet's root dir for the tests of package subpath and its
// sub-packages (copies, liveupdate): pods, volumes filled as kubelet's atomic writer fills them,
// and subPath bind targets. It mounts, so its users run in a private mount namespace
// (test/privatens). It imports nothing of mountkeeper's, so that package subpath's own tests can
// use it.
package subpathtest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Kubelet imitates the parts of kubelet's root dir that subPath mounts use, in a temporary
// directory. The root dir is a bind mount of itself made shared, as kubelet makes its root
// rshared; a repaired bind must come out private all the same.
type Kubelet struct {
	T    testing.TB
	Root string
	UID  string // the pod that Pod, Volume and Bind make things of
	ts   int    // timestamp directories made so far
}

// Plugin directories of kubelet's volumes, below pods/<uid>/volumes.
const (
	ConfigMap   = "kubernetes.io~configmap"
	Secret      = "kubernetes.io~secret"
	Projected   = "kubernetes.io~projected"
	DownwardAPI = "kubernetes.io~downward-api"
	EmptyDir    = "kubernetes.io~empty-dir"
	CSI         = "kubernetes.io~csi"
)

// NewKubelet makes a kubelet root dir below a temporary directory of t.
func NewKubelet(t testing.TB) *Kubelet {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "kubelet")
	Must(t, os.MkdirAll(root, 0o755))
	Must(t, unix.Mount(root, root, "", unix.MS_BIND, ""))
	// Registered after TempDir's own cleanup, so it runs first: the whole tree of mounts goes
	// before the directory is removed.
	t.Cleanup(func() {
		if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", root, err)
		}
	})
	Must(t, unix.Mount("", root, "", unix.MS_SHARED, ""))
	return &Kubelet{T: t, Root: root, UID: "0f5a4c1e-uid"}
}

// Pod is the pod's directory, pods/<uid>.
func (k *Kubelet) Pod() string { return filepath.Join(k.Root, "pods", k.UID) }

// Volume makes pods/<uid>/volumes/<plugin>/<name>, on its own tmpfs if asked (as kubelet
// mounts secrets).
func (k *Kubelet) Volume(plugin, name string, tmpfs bool) string {
	dir := filepath.Join(k.Pod(), "volumes", plugin, name)
	Must(k.T, os.MkdirAll(dir, 0o755))
	if tmpfs {
		Must(k.T, unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"))
	}
	return dir
}

// Entry is one file of a volume payload: content, or a symlink (link), or a directory (dir).
type Entry struct {
	content, link string
	dir           bool
}

// File is a regular file of content.
func File(content string) Entry { return Entry{content: content} }

// Symlink is a symlink to to.
func Symlink(to string) Entry { return Entry{link: to} }

// WriteTree writes entries (paths relative to dir) below dir.
func WriteTree(t testing.TB, dir string, files map[string]Entry) {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e, p := files[n], filepath.Join(dir, n)
		Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		switch {
		case e.dir:
			Must(t, os.MkdirAll(p, 0o755))
		case e.link != "":
			Must(t, os.Symlink(e.link, p))
		default:
			Must(t, os.WriteFile(p, []byte(e.content), 0o644))
		}
	}
}

// WriteAtomic fills volDir the way kubelet's atomic writer does: a new ..<timestamp>
// directory, ..data_tmp pointing to it renamed over ..data, a top-level symlink name ->
// ..data/name per top-level entry (stale ones removed), then the old timestamp directory
// removed. It returns the new timestamp directory's name.
func (k *Kubelet) WriteAtomic(volDir string, files map[string]Entry) string {
	t := k.T
	t.Helper()
	k.ts++
	ts := fmt.Sprintf("..2026_11_22_07_%02d_%02d.%09d", k.ts/60, k.ts%60, k.ts)
	WriteTree(t, filepath.Join(volDir, ts), files)
	old, _ := os.Readlink(filepath.Join(volDir, "..data"))
	Must(t, os.Symlink(ts, filepath.Join(volDir, "..data_tmp")))
	Must(t, os.Rename(filepath.Join(volDir, "..data_tmp"), filepath.Join(volDir, "..data")))
	top := map[string]bool{}
	for n := range files {
		top[strings.SplitN(n, "/", 2)[0]] = true
	}
	entries, err := os.ReadDir(volDir)
	Must(t, err)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") && !top[e.Name()] {
			Must(t, os.Remove(filepath.Join(volDir, e.Name())))
		}
	}
	for n := range top {
		if _, err := os.Lstat(filepath.Join(volDir, n)); os.IsNotExist(err) {
			Must(t, os.Symlink(filepath.Join("..data", n), filepath.Join(volDir, n)))
		}
	}
	if old != "" {
		Must(t, os.RemoveAll(filepath.Join(volDir, old)))
	}
	return ts
}

// Bind does what kubelet does for a subPath: resolve it inside the volume (trusted here) and
// bind the result onto pods/<uid>/volume-subpaths/<volume>/<container>/<index>, a file for a
// file and a directory for a directory. It returns the target as parse (subpath.ParseTarget)
// reads it, which must accept it.
func Bind[T any](k *Kubelet, parse func(kubeletRoot, source string) (T, bool), volDir, volume, container string, index int, subPath string) T {
	t := k.T
	t.Helper()
	resolved, err := filepath.EvalSymlinks(filepath.Join(volDir, subPath))
	Must(t, err)
	fi, err := os.Stat(resolved)
	Must(t, err)
	target := filepath.Join(k.Pod(), "volume-subpaths", volume, container, fmt.Sprint(index))
	Must(t, os.MkdirAll(filepath.Dir(target), 0o750))
	if fi.IsDir() {
		Must(t, os.Mkdir(target, 0o750))
	} else {
		Must(t, os.WriteFile(target, nil, 0o640))
	}
	Must(t, unix.Mount(resolved, target, "", unix.MS_BIND, ""))
	tg, ok := parse(k.Root, target)
	if !ok {
		t.Fatalf("ParseTarget(%s, %s) rejects a target made as kubelet makes it", k.Root, target)
	}
	return tg
}

// Outside makes a file and a directory outside the kubelet root, which no repair may bind.
func Outside(t testing.TB) (file, dir string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	Must(t, err)
	dir = filepath.Join(base, "outside")
	file = filepath.Join(dir, "secret.txt")
	Must(t, os.MkdirAll(dir, 0o755))
	Must(t, os.WriteFile(file, []byte("OUTSIDE"), 0o644))
	return file, dir
}

// Show reads what a target holds: a file's content (a deleted file can still be read), or a
// directory's files with their content ("name=content", sorted; nested files by relative
// path).
func Show(t *testing.T, target string) string {
	t.Helper()
	fi, err := os.Stat(target)
	Must(t, err)
	if !fi.IsDir() {
		b, err := os.ReadFile(target)
		Must(t, err)
		return string(b)
	}
	var st unix.Stat_t
	Must(t, unix.Stat(target, &st))
	if st.Nlink == 0 {
		return "(deleted directory)" // a removed directory cannot be listed
	}
	var out []string
	err = filepath.WalkDir(target, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(target, p)
		out = append(out, rel+"="+string(b))
		return nil
	})
	Must(t, err)
	return strings.Join(out, " ")
}

// Must fails t with err, if any.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// PinInFlight opens path and sends the descriptor over a unix socket pair, closing its own:
// the file is then held by a message in flight, in no process's fd table, so no scan of
// /proc finds it. The pair is closed when the test ends (or by the returned func).
func PinInFlight(t *testing.T, path string) func() {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	Must(t, err)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	Must(t, err)
	Must(t, unix.Sendmsg(pair[0], []byte{0}, unix.UnixRights(fd), nil, 0))
	unix.Close(fd)
	done := false
	release := func() {
		if !done {
			done = true
			unix.Close(pair[0])
			unix.Close(pair[1])
		}
	}
	t.Cleanup(release)
	return release
}
