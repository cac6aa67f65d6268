package vm

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// busybox is a static busybox (package busybox-static): the initramfs's only program.
const busybox = "/bin/busybox"

// bootModules are what the initramfs loads to mount the host's root: the virtio PCI
// transport, virtiofs (with fuse) and overlay. Each is a module or built in, depending on the
// kernel (6.12's cloud flavour builds virtio in; 5.10's and 6.1's do not).
var bootModules = []string{"virtio_pci", "virtiofs", "overlay"}

// moduleOrder returns the module files (paths relative to the modules directory) to insmod,
// in an order that loads every module after what it depends on, from modules.dep and
// modules.builtin of the kernel's release directory.
func moduleOrder(releaseDir string, names []string) ([]string, error) {
	deps := map[string][]string{} // module name -> its file, then its dependencies' files
	byFile := map[string]string{}
	if err := eachLine(filepath.Join(releaseDir, "modules.dep"), func(line string) {
		file, rest, ok := strings.Cut(line, ":")
		if !ok {
			return
		}
		deps[moduleName(file)] = append([]string{file}, strings.Fields(rest)...)
		byFile[file] = moduleName(file)
	}); err != nil {
		return nil, err
	}
	builtin := map[string]bool{}
	if err := eachLine(filepath.Join(releaseDir, "modules.builtin"), func(line string) {
		builtin[moduleName(line)] = true
	}); err != nil {
		return nil, err
	}
	var order []string
	seen := map[string]bool{}
	var load func(name string) error
	load = func(name string) error {
		if seen[name] {
			return nil
		}
		seen[name] = true
		d, ok := deps[name]
		if !ok {
			if builtin[name] {
				return nil
			}
			return fmt.Errorf("%s: module %s is neither in modules.dep nor built in", releaseDir, name)
		}
		// modules.dep lists a module's dependencies so that loading them from last to first works.
		for i := len(d) - 1; i >= 1; i-- {
			if err := load(byFile[d[i]]); err != nil {
				return err
			}
		}
		order = append(order, d[0])
		return nil
	}
	for _, n := range names {
		if err := load(n); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleName is the name modprobe knows a module file by: kernel/fs/fuse/virtio-fs.ko.xz -> virtio_fs.
func moduleName(file string) string {
	base := filepath.Base(file)
	base, _, _ = strings.Cut(base, ".ko")
	return strings.ReplaceAll(base, "-", "_")
}

func eachLine(path string, f func(string)) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		f(sc.Text())
	}
	return sc.Err()
}

// readModule returns a module file's contents, uncompressed: busybox's insmod takes plain
// modules only.
func readModule(path string) ([]byte, error) {
	switch {
	case strings.HasSuffix(path, ".ko"):
		return os.ReadFile(path)
	case strings.HasSuffix(path, ".ko.xz"):
		out, err := exec.Command("xz", "-dc", path).Output()
		if err != nil {
			return nil, fmt.Errorf("xz -dc %s: %w", path, err)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%s: unknown module compression", path)
	}
}

// cpioWriter writes a cpio archive in the "newc" format the kernel unpacks as initramfs.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	var b bytes.Buffer
	fmt.Fprintf(&b, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	b.WriteString(name)
	b.WriteByte(0)
	pad(&b, b.Len())
	b.Write(data)
	pad(&b, len(data))
	_, c.err = c.w.Write(b.Bytes())
}

// pad aligns what follows n bytes to 4 bytes (newc's header, name and data each are).
func pad(b *bytes.Buffer, n int) {
	for ; n%4 != 0; n++ {
		b.WriteByte(0)
	}
}

func (c *cpioWriter) dir(name string)                         { c.entry(name, 0o040755, 0, 0, nil) }
func (c *cpioWriter) file(name string, m uint32, data []byte) { c.entry(name, 0o100000|m, 0, 0, data) }
func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}

// writeInitramfs writes the guest's initramfs to path: busybox, the modules that mount the
// host's root, and init (see initScript).
func writeInitramfs(path string, k Kernel, config []byte) error {
	releaseDir := filepath.Join(k.ModulesDir(), k.Release)
	mods, err := moduleOrder(releaseDir, bootModules)
	if err != nil {
		return err
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	c := &cpioWriter{w: w}
	for _, d := range []string{"bin", "dev", "proc", "sys", "lower", "rw", "newroot", "modules"} {
		c.dir(d)
	}
	c.entry("dev/console", 0o020600, 5, 1, nil)
	c.file("bin/busybox", 0o755, bb)
	var list strings.Builder
	for i, m := range mods {
		data, err := readModule(filepath.Join(releaseDir, m))
		if err != nil {
			return err
		}
		name := fmt.Sprintf("modules/%02d-%s.ko", i, moduleName(m))
		c.file(name, 0o644, data)
		list.WriteString("/" + name + "\n")
	}
	c.file("modules/order", 0o644, []byte(list.String()))
	c.file("config", 0o644, config)
	c.file("init", 0o755, []byte(initScript))
	if err := c.close(); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}
