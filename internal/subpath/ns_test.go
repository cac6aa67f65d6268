package subpath

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// kubelet imitates the parts of kubelet's root dir that subPath mounts use, in a temporary
// directory. The root dir is a bind mount of itself made shared, as kubelet makes its root
// rshared; a repaired bind must come out private all the same.
type kubelet struct {
	t    testing.TB
	root string
	uid  string
	ts   int // timestamp directories made so far
}

func newKubelet(t testing.TB) *kubelet {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "kubelet")
	must(t, os.MkdirAll(root, 0o755))
	must(t, unix.Mount(root, root, "", unix.MS_BIND, ""))
	// Registered after TempDir's own cleanup, so it runs first: the whole tree of mounts goes
	// before the directory is removed.
	t.Cleanup(func() {
		if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", root, err)
		}
	})
	must(t, unix.Mount("", root, "", unix.MS_SHARED, ""))
	return &kubelet{t: t, root: root, uid: "0f5a4c1e-uid"}
}

func (k *kubelet) pod() string { return filepath.Join(k.root, "pods", k.uid) }

// volume makes pods/<uid>/volumes/<plugin>/<name>, on its own tmpfs if asked (as kubelet
// mounts secrets).
func (k *kubelet) volume(plugin, name string, tmpfs bool) string {
	dir := filepath.Join(k.pod(), "volumes", plugin, name)
	must(k.t, os.MkdirAll(dir, 0o755))
	if tmpfs {
		must(k.t, unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"))
	}
	return dir
}

// entry is one file of a volume payload: content, or a symlink (link), or a directory (dir).
type entry struct {
	content, link string
	dir           bool
}

func file(content string) entry { return entry{content: content} }
func symlink(to string) entry   { return entry{link: to} }

// writeTree writes entries (paths relative to dir) below dir.
func writeTree(t testing.TB, dir string, files map[string]entry) {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e, p := files[n], filepath.Join(dir, n)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		switch {
		case e.dir:
			must(t, os.MkdirAll(p, 0o755))
		case e.link != "":
			must(t, os.Symlink(e.link, p))
		default:
			must(t, os.WriteFile(p, []byte(e.content), 0o644))
		}
	}
}

// writeAtomic fills volDir the way kubelet's atomic writer does: a new ..<timestamp>
// directory, ..data_tmp pointing to it renamed over ..data, a top-level symlink name ->
// ..data/name per top-level entry (stale ones removed), then the old timestamp directory
// removed. It returns the new timestamp directory's name.
func (k *kubelet) writeAtomic(volDir string, files map[string]entry) string {
	t := k.t
	t.Helper()
	k.ts++
	ts := fmt.Sprintf("..2026_11_22_07_%02d_%02d.%09d", k.ts/60, k.ts%60, k.ts)
	writeTree(t, filepath.Join(volDir, ts), files)
	old, _ := os.Readlink(filepath.Join(volDir, "..data"))
	must(t, os.Symlink(ts, filepath.Join(volDir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(volDir, "..data_tmp"), filepath.Join(volDir, "..data")))
	top := map[string]bool{}
	for n := range files {
		top[strings.SplitN(n, "/", 2)[0]] = true
	}
	entries, err := os.ReadDir(volDir)
	must(t, err)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") && !top[e.Name()] {
			must(t, os.Remove(filepath.Join(volDir, e.Name())))
		}
	}
	for n := range top {
		if _, err := os.Lstat(filepath.Join(volDir, n)); os.IsNotExist(err) {
			must(t, os.Symlink(filepath.Join("..data", n), filepath.Join(volDir, n)))
		}
	}
	if old != "" {
		must(t, os.RemoveAll(filepath.Join(volDir, old)))
	}
	return ts
}

// bind does what kubelet does for a subPath: resolve it inside the volume (trusted here) and
// bind the result onto pods/<uid>/volume-subpaths/<volume>/<container>/<index>, a file for a
// file and a directory for a directory.
func (k *kubelet) bind(volDir, volume, container string, index int, subPath string) Target {
	t := k.t
	t.Helper()
	resolved, err := filepath.EvalSymlinks(filepath.Join(volDir, subPath))
	must(t, err)
	fi, err := os.Stat(resolved)
	must(t, err)
	target := filepath.Join(k.pod(), "volume-subpaths", volume, container, fmt.Sprint(index))
	must(t, os.MkdirAll(filepath.Dir(target), 0o750))
	if fi.IsDir() {
		must(t, os.Mkdir(target, 0o750))
	} else {
		must(t, os.WriteFile(target, nil, 0o640))
	}
	must(t, unix.Mount(resolved, target, "", unix.MS_BIND, ""))
	tg, ok := ParseTarget(k.root, target)
	if !ok {
		t.Fatalf("ParseTarget(%s, %s) rejects a target made as kubelet makes it", k.root, target)
	}
	return tg
}

// outside makes a file and a directory outside the kubelet root, which no repair may bind.
func outside(t testing.TB) (file, dir string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	dir = filepath.Join(base, "outside")
	file = filepath.Join(dir, "secret.txt")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(file, []byte("OUTSIDE"), 0o644))
	return file, dir
}

// show reads what a target holds: a file's content (a deleted file can still be read), or a
// directory's files with their content ("name=content", sorted; nested files by relative
// path).
func show(t *testing.T, target string) string {
	t.Helper()
	fi, err := os.Stat(target)
	must(t, err)
	if !fi.IsDir() {
		b, err := os.ReadFile(target)
		must(t, err)
		return string(b)
	}
	var st unix.Stat_t
	must(t, unix.Stat(target, &st))
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
	must(t, err)
	return strings.Join(out, " ")
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
