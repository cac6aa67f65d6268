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
	"github.com/mountkeeper/mountkeeper/runtimeconfig"
)

// runRuntime is `mountkeeper runtime configure`: it writes what containerd or CRI-O needs for
// the config's runtime classes (see package runtimeconfig), or prints it with --dry-run.
func runRuntime(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "configure" {
		fmt.Fprintln(stderr, "usage: mountkeeper runtime configure --runtime containerd|crio [--config FILE] [--config-file PATH] [--dry-run]")
		return cli.ErrUsage
	}
	flags := cli.NewFlags("mountkeeper runtime configure", stderr)
	loadConfig := cli.ConfigFlag(flags)
	runtime := flags.String("runtime", "", "the runtime to configure: containerd or crio")
	configFile := flags.String("config-file", "", "the runtime's config: default "+runtimeconfig.ContainerdConfigPath+" (containerd), "+runtimeconfig.CRIODropInPath+" (crio, a drop-in of mountkeeper's own)")
	hookPath := flags.String("hook-path", "", "the mountkeeper binary the runtime runs as the guard hook (default: this binary)")
	installHook := flags.String("install-hook", "", "copy this binary to PATH (a host path, e.g. from a DaemonSet's init container) and use it as --hook-path")
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
			if err := installSelf(*installHook, stdout); err != nil {
				return err
			}
		}
	}
	if *hookPath == "" {
		if *hookPath, err = os.Executable(); err != nil {
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
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	tmp := path + ".mountkeeper-tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, path)
}

// installSelf copies this binary to path (0755) unless it holds the same bytes already.
func installSelf(path string, stdout io.Writer) error {
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("--install-hook: read this binary: %w", err)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, self) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("--install-hook: %w", err)
	}
	tmp := path + ".mountkeeper-tmp"
	if err := os.WriteFile(tmp, self, 0o755); err != nil {
		return fmt.Errorf("--install-hook: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("--install-hook: %w", err)
	}
	fmt.Fprintln(stdout, "installed", path)
	return nil
}
