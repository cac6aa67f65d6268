package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mountkeeper/mountkeeper/cmd/internal/cli"
	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/hostns"
	"github.com/mountkeeper/mountkeeper/internal/reexec"
	"github.com/mountkeeper/mountkeeper/internal/runtimeconfig"
)

// runtimeInHostNamespaces is the reexec entry hostns.Enter starts in the host's namespaces
// for `runtime configure|unconfigure --host-namespaces`: the command again (its first
// argument), which may not enter a second time.
const runtimeInHostNamespaces = "mountkeeper-runtime-in-host-namespaces"

func init() {
	reexec.Register(runtimeInHostNamespaces, func() {
		err := runRuntimeIn(os.Args[1:], os.Stdout, os.Stderr, runtimeconfig.Systemd{}, true)
		os.Exit(cli.ExitStatus(err, os.Stderr))
	})
}

const runtimeUsage = `usage: mountkeeper runtime configure --runtime containerd|crio [--distribution auto|kubeadm|k3s|rke2|microk8s|kind] [--config FILE] [--config-file PATH] [--config-dir DIR] [--drop-in PATH] [--install-dir DIR] [--runtime-binary PATH] [--dry-run | --print-fragment] [--restart none|systemd] [--host-namespaces]
       mountkeeper runtime unconfigure --runtime containerd|crio [--distribution NAME] [--config-file PATH] [--config-dir DIR] [--drop-in PATH] [--install-dir DIR] [--base-spec-dir DIR] [--hook PATH] [--force] [--dry-run] [--restart none|systemd] [--host-namespaces]`

// runRuntime is `mountkeeper runtime configure|unconfigure` (package runtimeconfig does the
// work): it parses the flags, shows the plan (--dry-run) or applies it, and restarts the
// runtime through systemd when asked (--restart).
func runRuntime(args []string, stdout, stderr io.Writer) error {
	return runRuntimeWith(args, stdout, stderr, runtimeconfig.Systemd{})
}

func runRuntimeWith(args []string, stdout, stderr io.Writer, restarter runtimeconfig.Restarter) error {
	return runRuntimeIn(args, stdout, stderr, restarter, false)
}

// runtimeFlags are the flags of `runtime configure|unconfigure`, parsed.
type runtimeFlags struct {
	undo          bool // unconfigure
	o             runtimeconfig.Options
	loadConfig    func() (*configs.Config, string, error) // configure only
	distribution  string
	wrapper       string
	baseSpecDir   string
	hook          string
	printFragment bool
	dryRun        bool
	force         bool
	restart       restartFlag
}

// restartFlag is --restart none|systemd; a bare --restart, as before the modes, is systemd.
type restartFlag struct{ mode runtimeconfig.RestartMode }

func (f *restartFlag) String() string {
	if f == nil || f.mode == "" {
		return string(runtimeconfig.RestartNone)
	}
	return string(f.mode)
}

func (f *restartFlag) Set(s string) (err error) {
	f.mode, err = runtimeconfig.ParseRestartMode(s)
	return err
}

func (f *restartFlag) IsBoolFlag() bool { return true }

// runRuntimeIn is runRuntimeWith; inHost says this process is the one hostns.Enter started.
func runRuntimeIn(args []string, stdout, stderr io.Writer, restarter runtimeconfig.Restarter, inHost bool) error {
	if len(args) == 0 || (args[0] != "configure" && args[0] != "unconfigure") {
		fmt.Fprintln(stderr, runtimeUsage)
		return cli.ErrUsage
	}
	f := runtimeFlags{undo: args[0] == "unconfigure"}
	flags := cli.NewFlags("mountkeeper runtime "+args[0], stderr)
	var configPath *string
	if !f.undo {
		configPath, f.loadConfig = cli.ConfigFlag(flags)
	}
	// The chart runs both from a pod: the runtime's files, the install directory (and the
	// directories configure creates, which unconfigure removes) and the processes are the
	// host's.
	enter := flags.Bool(hostns.Flag, false, "enter the mount and cgroup namespaces of PID 1 first (the chart's init container and uninstall: a pod with hostPID: true, privileged)")
	hostPID := flags.String(hostns.PIDFlag, "1", "with --host-namespaces: whose namespaces to enter")
	flags.StringVar(&f.o.Runtime, "runtime", "", "the runtime: containerd or crio")
	flags.StringVar(&f.distribution, "distribution", "auto", "containerd: the node's Kubernetes distribution, whose paths, config template and unit are the defaults: auto (detected from the files present), "+strings.Join(runtimeconfig.DistributionNames(), ", "))
	flags.StringVar(&f.o.ConfigFile, "config-file", "", "the runtime's main config (default "+runtimeconfig.ContainerdConfigPath+", "+runtimeconfig.CRIOConfigPath+"); containerd's gets one imports entry at most, CRI-O's none")
	flags.StringVar(&f.o.ConfigDir, "config-dir", "", "crio: its drop-in directory (default "+runtimeconfig.CRIOConfigDir+")")
	flags.StringVar(&f.o.DropIn, "drop-in", "", "mountkeeper's drop-in (default "+runtimeconfig.ContainerdDropInPath+"; crio: "+runtimeconfig.CRIODropInName+" in --config-dir)")
	flags.StringVar(&f.o.InstallDir, "install-dir", runtimeconfig.DefaultInstallDir, "where "+runtimeconfig.WrapperName+" and the class links go (a host path)")
	runtimeCommand := flags.String("runtime-command", "", "the runtime's own binary, run for its effective config (containerd config dump, crio config) before its files are read (default: containerd or crio on PATH; files alone when it is not there)")
	flags.StringVar(&f.wrapper, "runtime-binary", "", "configure: the "+runtimeconfig.WrapperName+" binary to install (default: the one beside this binary)")
	flags.StringVar(&f.baseSpecDir, "base-spec-dir", "/etc/mountkeeper/containerd", "unconfigure: where an earlier mountkeeper put its guard base specs (removed); configure: ignored (no base spec)")
	flags.StringVar(&f.hook, "hook", "", "unconfigure: the guard hook binary an earlier mountkeeper installed (--install-hook), removed")
	// Flags of the base-spec guard (before the runtime wrapper), accepted so that manifests
	// written for it keep working; configure says it ignores them.
	installHook := flags.String("install-hook", "", "deprecated, ignored: configure installs "+runtimeconfig.WrapperName+" in --install-dir instead of a guard hook")
	hookPath := flags.String("hook-path", "", "deprecated, ignored: the guard is "+runtimeconfig.WrapperName+", not a hook")
	flags.BoolVar(&f.printFragment, "print-fragment", false, "configure: write nothing; print the runtime config fragment the classes need, for a config the OS owns (Talos machine config, Bottlerocket settings, EKS nodeadm, an OpenShift MachineConfig)")
	flags.BoolVar(&f.dryRun, "dry-run", false, "show what would change (a unified diff) and change nothing")
	flags.BoolVar(&f.force, "force", false, "unconfigure: even while the runtime still runs containers of the classes (it cannot stop them afterwards)")
	f.restart.mode = runtimeconfig.RestartNone
	flags.Var(&f.restart, "restart", "none: say what to restart when the runtime's config changed; systemd (or a bare --restart): systemctl restart the distribution's unit (containerd, k3s or k3s-agent, rke2-server or rke2-agent, snap.microk8s.daemon-containerd; crio)")
	if err := cli.Parse(flags, args[1:]); err != nil {
		return err
	}
	if *enter {
		if inHost {
			return fmt.Errorf("--%s: already re-executed in the host's namespaces", hostns.Flag)
		}
		return enterHostForRuntime(flags, args[0], *hostPID, configPath, f.wrapper)
	}
	if !f.undo {
		for name, v := range map[string]string{"--install-hook": *installHook, "--hook-path": *hookPath} {
			if v != "" {
				fmt.Fprintf(stderr, "note: %s is ignored: class handlers run %s from --install-dir (%s); no guard hook is installed\n", name, runtimeconfig.WrapperName, f.o.InstallDir)
			}
		}
	}
	f.o.Effective = runtimeconfig.RuntimeCommand{Binary: *runtimeCommand}
	return runRuntimeCommand(f, stdout, stderr, restarter)
}

// runRuntimeCommand resolves f's defaults, makes the plan, and shows it (--dry-run), prints the
// fragment (--print-fragment) or applies it.
func runRuntimeCommand(f runtimeFlags, stdout, stderr io.Writer, restarter runtimeconfig.Restarter) error {
	d, err := runtimeconfig.ResolveDistribution(f.distribution, runtimeconfig.PathExists)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ErrUsage
	}
	o := f.o.ForDistribution(d, runtimeconfig.RestartUnit(f.o.Runtime, d, runtimeconfig.UnitFileExists))
	if o, err = o.WithDefaults(); err != nil {
		fmt.Fprintln(stderr, err)
		return cli.ErrUsage
	}
	var plan runtimeconfig.Plan
	if f.undo {
		earlier, err := runtimeconfig.EarlierInstall(f.baseSpecDir, f.hook)
		if err != nil {
			return err
		}
		if plan, err = runtimeconfig.Unconfigure(o, earlier, "/proc", f.force); err != nil {
			return err
		}
	} else {
		cfg, _, err := f.loadConfig()
		if err != nil {
			return err
		}
		classes, err := runtimeconfig.HandlerClasses(cfg)
		if err != nil {
			return err
		}
		o.StateDir = cfg.StateDir
		if f.printFragment {
			return printFragment(o, classes, stdout, stderr)
		}
		if o.Wrapper = f.wrapper; o.Wrapper == "" {
			if o.Wrapper, err = besideSelf(runtimeconfig.WrapperName); err != nil {
				return err
			}
		}
		if plan, err = runtimeconfig.Configure(o, classes, "/proc"); err != nil {
			return err
		}
	}
	for _, n := range plan.Notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	if f.dryRun {
		fmt.Fprint(stdout, plan.Diff())
		if plan.RestartNeeded() {
			fmt.Fprintf(stdout, "# then: restart %s (systemctl restart %s)\n", o.Runtime, o.Unit())
		}
		return nil
	}
	return applyRuntimePlan(plan, f.restart.mode, stdout, restarter)
}

// printFragment is --print-fragment: the runtime config the classes need, written nowhere.
func printFragment(o runtimeconfig.Options, classes []string, stdout, stderr io.Writer) error {
	fragment, notes, err := runtimeconfig.Fragment(o, classes)
	for _, n := range notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	if err == nil {
		_, err = stdout.Write(fragment)
	}
	return err
}

// applyRuntimePlan applies plan, says what changed, and restarts the runtime when asked and
// its config changed.
func applyRuntimePlan(plan runtimeconfig.Plan, restart runtimeconfig.RestartMode, stdout io.Writer, restarter runtimeconfig.Restarter) error {
	if len(plan.Changes) == 0 {
		fmt.Fprintln(stdout, "nothing to change")
		return nil
	}
	if err := runtimeconfig.Apply(plan); err != nil {
		return err
	}
	for _, c := range plan.Changes {
		fmt.Fprintln(stdout, c.Summary())
	}
	line, err := runtimeconfig.RestartIfNeeded(context.Background(), plan, restarter, restart)
	if line != "" {
		fmt.Fprintln(stdout, line)
	}
	return err
}

// enterHostForRuntime re-executes `runtime <command>` in the host's namespaces with the flags
// given, except those that led here. configure's config (--config) and the wrapper it installs
// (--runtime-binary, default beside this binary) are files of the container: they are handed
// over through descriptors.
func enterHostForRuntime(flags *flag.FlagSet, command, hostPID string, configPath *string, wrapper string) error {
	rest := []string{command}
	flags.Visit(func(f *flag.Flag) {
		switch f.Name {
		case hostns.Flag, hostns.PIDFlag, "config", "runtime-binary":
		default:
			rest = append(rest, "--"+f.Name+"="+f.Value.String())
		}
	})
	if command == "unconfigure" {
		return hostns.Enter(runtimeInHostNamespaces, rest, hostPID, "", nil)
	}
	if wrapper == "" {
		var err error
		if wrapper, err = besideSelf(runtimeconfig.WrapperName); err != nil {
			return err
		}
	}
	return hostns.Enter(runtimeInHostNamespaces, rest, hostPID, *configPath, map[string]string{"runtime-binary": wrapper})
}

// besideSelf is name in this binary's directory (make build and the image put mountkeeper's
// binaries side by side).
func besideSelf(name string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(self), name), nil
}
