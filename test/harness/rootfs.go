package harness

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// busyboxPath is where Debian's busybox-static package (installed by install.sh) puts it.
const busyboxPath = "/bin/busybox"

// imagePATH is the PATH of both images; the busybox applets live in these directories.
const imagePATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// busybox is the host's static busybox and the applets it provides.
type busybox struct {
	binary  []byte
	applets []string // paths relative to /, as printed by `busybox --list-full`
}

// loadBusybox reads the host's busybox and checks it is static: a dynamic one would need the
// host's libc inside the image and fail with a confusing "no such file" at exec time.
func loadBusybox() (*busybox, error) {
	bin, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w (apt-get install busybox-static)", busyboxPath, err)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", busyboxPath, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is dynamically linked (apt-get install busybox-static)", busyboxPath)
		}
	}
	out, err := exec.Command(busyboxPath, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", busyboxPath, err)
	}
	return &busybox{binary: bin, applets: strings.Fields(string(out))}, nil
}

// image lays out busybox at /bin/busybox with an absolute symlink per applet, plus the
// directories and /etc files a shell and mount(8) expect.
func (b *busybox) image() imageSpec {
	files := map[string]fileEntry{}
	addDir := func(dir string, mode int64) {
		for d := dir; d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := files[d]; !ok {
				files[d] = dirEntry(d, mode)
			}
		}
	}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "root", "run", "var", "mnt"} {
		addDir(d, 0o755)
	}
	files["tmp"] = dirEntry("tmp", 0o1777)
	files["bin/busybox"] = fileEntryOf("bin/busybox", 0o755, b.binary)
	for _, a := range b.applets {
		a = strings.TrimPrefix(path.Clean(a), "/")
		if _, taken := files[a]; taken {
			continue
		}
		addDir(path.Dir(a), 0o755)
		files[a] = symlinkEntry(a, busyboxPath)
	}
	files["etc/passwd"] = fileEntryOf("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	files["etc/group"] = fileEntryOf("etc/group", 0o644, []byte("root:x:0:\n"))
	files["etc/mtab"] = symlinkEntry("etc/mtab", "/proc/mounts") // mount(8) reads it
	return imageSpec{name: BusyboxImage, files: sortedEntries(files), env: []string{imagePATH}, cmd: []string{"sh"}}
}

// sortedEntries orders entries by name, which puts every directory before its contents.
func sortedEntries(m map[string]fileEntry) []fileEntry {
	out := make([]fileEntry, 0, len(m))
	for _, n := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[n])
	}
	return out
}

// pauseSource is the sandbox process: it holds the pod's namespaces until CRI stops the pod,
// and reaps orphans in case a pod shares its PID namespace.
const pauseSource = `// Command pause is the sandbox process of the mountkeeper test harness.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
`

// buildPause compiles pauseSource into a static binary inside workDir and returns its bytes.
func buildPause(ctx context.Context, workDir string) ([]byte, error) {
	dir, err := os.MkdirTemp(workDir, "pause-build-")
	if err != nil {
		return nil, fmt.Errorf("create pause build dir in %s: %w", workDir, err)
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(pauseSource), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", src, err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("build pause: %w", err)
	}
	out := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, src)
	cmd.Dir = dir
	// A single file outside any module: GOFLAGS from the caller (-mod=vendor, -tags...) and a
	// go.work must not apply to it.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off", "GO111MODULE=on")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", src, err, msg)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", out, err)
	}
	return bin, nil
}

func pauseImage(binary []byte) imageSpec {
	return imageSpec{
		name:       PauseImage,
		files:      []fileEntry{fileEntryOf("pause", 0o755, binary)},
		env:        []string{imagePATH},
		entrypoint: []string{"/pause"},
	}
}
