package netmount

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// Env is what Preflight reads of the node.
type Env interface {
	// LookPath finds a program as a shell would, in PATH and, since NRI plugins start without
	// PATH, in the standard bin and sbin directories.
	LookPath(file string) (string, error)
	// LookHelper finds a mount helper (mount.nfs, mount.fuse, ...) where mount(8) looks for it.
	LookHelper(name string) (string, error)
	// KernelSupports says whether the kernel has the filesystem type fs (/proc/filesystems)
	// or can load it on demand (a module with an fs-<type> alias).
	KernelSupports(fs string) (bool, error)
	// Exists says whether path exists (device nodes such as /dev/fuse).
	Exists(path string) bool
}

// PreflightError lists what the node lacks to mount a spec. Its message names each missing
// piece and the fix (the package on Debian/Ubuntu and on RHEL/Fedora, or the modprobe); it
// does not name the spec, which callers add.
type PreflightError struct {
	Problems []string
}

func (e *PreflightError) Error() string { return strings.Join(e.Problems, "; ") }

// Preflight checks that the node can mount s: mount(8), the helper mount(8) needs for the type
// (mount.nfs, mount.cifs, ..., or for fuse.<program> the program and mount.fuse), and kernel
// support for the filesystem (and /dev/fuse for FUSE filesystems). It returns a
// *PreflightError naming every missing piece, or the error of s.Validate.
func Preflight(env Env, s netspec.Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	ft, _ := netspec.Lookup(s.Type)
	prog := ft.Program
	var problems []string
	missing := func(what, debian, rhel string) {
		problems = append(problems, fmt.Sprintf("%s not found: install %s (Debian/Ubuntu) or %s (RHEL/Fedora)", what, debian, rhel))
	}
	if _, err := env.LookPath("mount"); err != nil {
		missing("mount", "mount", "util-linux")
	}
	if prog == "" {
		if _, err := env.LookHelper(ft.Helper); err != nil {
			missing(fmt.Sprintf("%s (the helper \"mount -t %s\" runs)", ft.Helper, s.Type), ft.Debian, ft.RHEL)
		}
	} else {
		if _, err := env.LookPath(prog); err != nil {
			if ft.KnownPackages {
				missing(fmt.Sprintf("%s (the FUSE program of %s)", prog, s.Type), ft.Debian, ft.RHEL)
			} else {
				problems = append(problems, fmt.Sprintf("%s (the FUSE program of %s) not found: install the package that provides it", prog, s.Type))
			}
		}
		if _, err := env.LookHelper("mount.fuse." + prog); err != nil {
			if _, err := env.LookHelper("mount.fuse"); err != nil {
				missing(fmt.Sprintf("mount.fuse (the helper \"mount -t %s\" runs; mount.fuse.%s would do too)", s.Type, prog), "fuse3", "fuse3")
			}
		}
	}
	switch supported, err := env.KernelSupports(ft.KernelFS); {
	case err != nil:
		problems = append(problems, fmt.Sprintf("cannot tell whether the kernel supports %s: %v", ft.KernelFS, err))
	case !supported:
		problems = append(problems, fmt.Sprintf("the kernel does not support %s (not in /proc/filesystems, no module for it): run \"modprobe %s\", or use a kernel with %s support",
			ft.KernelFS, ft.Module, ft.KernelFS))
	}
	if ft.FUSE && !env.Exists("/dev/fuse") {
		problems = append(problems, "/dev/fuse does not exist: run \"modprobe fuse\" (or create it: mknod /dev/fuse c 10 229)")
	}
	if len(problems) > 0 {
		return &PreflightError{Problems: problems}
	}
	return nil
}

// LiveEnv reads the running node.
type LiveEnv struct{}

var _ Env = LiveEnv{}

// standardDirs are searched after PATH: NRI starts plugins with no PATH at all.
var standardDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// helperDirs are where libmount looks for mount helpers (FS_SEARCH_PATH).
var helperDirs = []string{"/sbin", "/sbin/fs.d", "/sbin/fs"}

// LookPath implements Env.
func (LiveEnv) LookPath(file string) (string, error) { return lookPath(file) }

func lookPath(file string) (string, error) {
	if p, err := exec.LookPath(file); err == nil {
		return p, nil
	}
	return findIn(standardDirs, file)
}

// LookHelper implements Env.
func (LiveEnv) LookHelper(name string) (string, error) { return findIn(helperDirs, name) }

func findIn(dirs []string, name string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if unix.Access(p, unix.X_OK) == nil {
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, strings.Join(dirs, ":"))
}

// KernelSupports implements Env: /proc/filesystems, plus the fs-<type> aliases in
// /lib/modules/<release>/modules.alias (the kernel loads such a module on the first mount).
func (LiveEnv) KernelSupports(fs string) (bool, error) { return kernelSupports(os.ReadFile, fs) }

// kernelSupports is KernelSupports reading files with readFile. modules.alias (about 1 MB on a
// distribution's generic kernel) is read only for a type /proc/filesystems lacks: every mount
// and heal attempt asks.
func kernelSupports(readFile func(string) ([]byte, error), fs string) (bool, error) {
	data, err := readFile("/proc/filesystems")
	if err != nil {
		return false, err
	}
	if parseFilesystems(data)[fs] {
		return true, nil
	}
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return false, nil
	}
	aliases, err := readFile(filepath.Join("/lib/modules", unix.ByteSliceToString(uts.Release[:]), "modules.alias"))
	if err != nil {
		return false, nil // no modules to load: what /proc/filesystems lists is all there is
	}
	return parseFSAliases(aliases)[fs], nil
}

// Exists implements Env.
func (LiveEnv) Exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// parseFilesystems reads /proc/filesystems: "nodev\tfuse" or "\text4".
func parseFilesystems(data []byte) map[string]bool {
	fss := make(map[string]bool)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			fss[f[len(f)-1]] = true
		}
	}
	return fss
}

// parseFSAliases reads modules.alias lines "alias fs-nfs nfs".
func parseFSAliases(data []byte) map[string]bool {
	fss := make(map[string]bool)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "alias" && strings.HasPrefix(f[1], "fs-") {
			fss[strings.TrimPrefix(f[1], "fs-")] = true
		}
	}
	return fss
}

// helperMissingText says whether mount(8)'s output (exit 32) says that the node lacks what
// the type needs: "... need a /sbin/mount.<type> helper program" when the kernel knows the
// type but the helper is missing, "unknown filesystem type 'nfs'" when the kernel does not.
func helperMissingText(stderr string) bool {
	return strings.Contains(stderr, "helper program") || strings.Contains(stderr, "unknown filesystem type")
}
