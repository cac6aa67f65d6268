package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// KubeletPod imitates the parts of kubelet's on-disk layout under its root dir that subPath
// mounts depend on: pods/<uid>/volumes/<plugin>/<volume> and
// pods/<uid>/volume-subpaths/<volume>/<container>/<index>.
type KubeletPod struct {
	Root, UID string
}

// VolumeDir is the directory of a volume, e.g. plugin "kubernetes.io~configmap".
func (p KubeletPod) VolumeDir(plugin, volume string) string {
	return filepath.Join(p.Root, "pods", p.UID, "volumes", plugin, volume)
}

// WriteAtomic writes files (relative path -> content) into volDir the way kubelet's atomic
// writer does: a new ..<timestamp> directory with the payload, ..data_tmp pointing to it and
// renamed over ..data, and a symlink name -> ..data/name for each top-level entry. It returns
// the previous timestamp directory ("" on the first write); the writer removes it next, which
// is what leaves a subPath bind of a file in it holding a deleted inode.
func WriteAtomic(volDir string, files map[string]string) (old string, err error) {
	if err := os.MkdirAll(volDir, 0o755); err != nil {
		return "", err
	}
	if target, err := os.Readlink(filepath.Join(volDir, "..data")); err == nil {
		old = filepath.Join(volDir, target)
	}
	ts := time.Now().UTC().Format("..2006_01_02_15_04_05.") + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	tsDir := filepath.Join(volDir, ts)
	top := map[string]bool{}
	for name, content := range files {
		p := filepath.Join(tsDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", err
		}
		top[strings.SplitN(name, "/", 2)[0]] = true
	}
	tmp := filepath.Join(volDir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, filepath.Join(volDir, "..data")); err != nil {
		return "", err
	}
	names := make([]string, 0, len(top))
	for n := range top {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		link := filepath.Join(volDir, n)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", n), link); err != nil {
			return "", err
		}
	}
	return old, nil
}

// BindSubPath does what kubelet does for a subPath: it resolves subPath inside the volume
// and bind-mounts the result onto pods/<uid>/volume-subpaths/<volume>/<container>/<index>,
// which becomes the container mount's source. It returns that target.
func (p KubeletPod) BindSubPath(volDir, volume, container string, index int, subPath string) (string, error) {
	resolved, err := filepath.EvalSymlinks(filepath.Join(volDir, subPath))
	if err != nil {
		return "", fmt.Errorf("resolve subPath %s in %s: %w", subPath, volDir, err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return "", err
	}
	target := filepath.Join(p.Root, "pods", p.UID, "volume-subpaths", volume, container, strconv.Itoa(index))
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return "", err
	}
	if fi.IsDir() {
		err = os.Mkdir(target, 0o750)
	} else {
		err = os.WriteFile(target, nil, 0o640)
	}
	if err != nil && !os.IsExist(err) {
		return "", err
	}
	if err := unix.Mount(resolved, target, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind %s onto %s: %w", resolved, target, err)
	}
	return target, nil
}
