package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/mountkeeper/mountkeeper/cmd/internal/cli"
	"github.com/mountkeeper/mountkeeper/internal/runtimeconfig"
)

// runRuntime is `mountkeeper runtime configure`: it writes what containerd or CRI-O needs for
// the config's runtime classes (see package runtimeconfig), or prints it with --dry-run.
func runRuntime(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "configure" {
		fmt.Fprintln(stderr, "usage: mountkeeper runtime configure --runtime containerd|crio [--config FILE] [--config-file PATH] [--dry-run]")
		return cli.ErrUsage
	}
	flags := cli.NewFlags("mountkeeper runtime configure", stderr)
	_, loadConfig := cli.ConfigFlag(flags)
	runtime := flags.String("runtime", "", "the runtime to configure: containerd or crio")
	configFile := flags.String("config-file", "", "the runtime's config: default "+runtimeconfig.ContainerdConfigPath+" (containerd), "+runtimeconfig.CRIODropInPath+" (crio, a drop-in of mountkeeper's own)")
	hookPath := flags.String("hook-path", "", "the binary the runtime runs as the guard hook (default: "+hookBinaryName+" beside this binary, else this binary)")
	installHook := flags.String("install-hook", "", "copy the guard hook's binary ("+hookBinaryName+" beside this binary, else this binary) to PATH (a host path, e.g. from a DaemonSet's init container) and use it as --hook-path")
	baseSpecDir := flags.String("base-spec-dir", runtimeconfig.DefaultBaseSpecDir, "containerd: where the per-class base runtime specs go")
	runcPath := flags.String("runc", "/usr/bin/runc", "crio: the OCI runtime the class handlers run")
	dryRun := flags.Bool("dry-run", false, "print what would be written instead of writing it")
	if err := cli.Parse(flags, args[1:]); err != nil {
		return err
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return err
	}
	if *installHook != "" {
		if *hookPath != "" {
			fmt.Fprintln(stderr, "--install-hook and --hook-path: give one")
			return cli.ErrUsage
		}
		*hookPath = *installHook
		if !*dryRun {
			if err := installHookBinary(*installHook, stdout); err != nil {
				return err
			}
		}
	}
	if *hookPath == "" {
		if *hookPath, err = hookBinary(); err != nil {
			return fmt.Errorf("--hook-path: %w", err)
		}
	}
	var res runtimeconfig.Result
	switch *runtime {
	case "containerd":
		*configFile = cmp.Or(*configFile, runtimeconfig.ContainerdConfigPath)
		current, err := os.ReadFile(*configFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		res, err = runtimeconfig.Containerd(current, cfg, runtimeconfig.Options{HookPath: *hookPath, BaseSpecDir: *baseSpecDir})
		if err != nil {
			return fmt.Errorf("%s: %w", *configFile, err)
		}
	case "crio":
		*configFile = cmp.Or(*configFile, runtimeconfig.CRIODropInPath)
		if res, err = runtimeconfig.CRIO(cfg, *runcPath); err != nil {
			return err
		}
	default:
		fmt.Fprintln(stderr, "--runtime: containerd or crio")
		return cli.ErrUsage
	}
	files := map[string][]byte{*configFile: res.Config}
	for p, b := range res.Files {
		files[p] = b
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, n := range res.Notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	changed := 0
	for _, p := range paths {
		if *dryRun {
			fmt.Fprintf(stdout, "# %s\n%s", p, files[p])
			continue
		}
		wrote, err := writeIfChanged(p, files[p])
		if err != nil {
			return err
		}
		if wrote {
			changed++
			fmt.Fprintln(stdout, "wrote", p)
		}
	}
	switch {
	case *dryRun:
	case changed == 0:
		fmt.Fprintln(stdout, "nothing to change")
	default:
		fmt.Fprintf(stdout, "restart %s to apply\n", *runtime)
	}
	return nil
}

// writeIfChanged writes data to path unless it holds data already, keeping the old content
// as path.<time>.bak; it reports whether it wrote.
func writeIfChanged(path string, data []byte) (bool, error) {
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(old, data):
		return false, nil
	case err == nil:
		if err := os.WriteFile(path+"."+time.Now().UTC().Format("20060102T150405")+".bak", old, 0o600); err != nil {
			return false, fmt.Errorf("back up %s: %w", path, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return false, err
	}
	return true, replaceFile(path, data, 0o644)
}

// replaceFile writes data to path with mode through a temporary file of its own in the same
// directory and a rename, so that the runtime never reads half a file and concurrent runs do
// not write the same temporary file. On any failure the temporary file is removed.
func replaceFile(path string, data []byte, mode os.FileMode) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".mountkeeper-tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	// CreateTemp makes the file 0600: give it mode (0644 for a runtime's config, 0755 for the
	// hook binary).
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// hookBinaryName is the lean hook binary (cmd/mountkeeper-hook), which `make build` and the
// image put beside mountkeeper. It accepts `hook guard ...` as mountkeeper does and starts in
// about a third of the time, which every container of a guarded class pays.
const hookBinaryName = "mountkeeper-hook"

// hookBinary is the binary the guard hook runs: mountkeeper-hook beside this binary when it
// is there, else this binary.
func hookBinary() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	return hookBinaryBeside(self), nil
}

// hookBinaryBeside is mountkeeper-hook in self's directory if it is an executable file there,
// else self.
func hookBinaryBeside(self string) string {
	lean := filepath.Join(filepath.Dir(self), hookBinaryName)
	if fi, err := os.Stat(lean); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return lean
	}
	return self
}

// installHookBinary copies hookBinary() to path (0755) unless it holds the same bytes already.
func installHookBinary(path string, stdout io.Writer) error {
	src, err := hookBinary()
	if err != nil {
		return fmt.Errorf("--install-hook: %w", err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("--install-hook: read %s: %w", src, err)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := replaceFile(path, data, 0o755); err != nil {
		return fmt.Errorf("--install-hook: %w", err)
	}
	fmt.Fprintf(stdout, "installed %s (from %s)\n", path, src)
	return nil
}
