// Command mountkeeper makes container volume mounts correct and durable. It wires command-line
// flags to the packages that do the work; docs/commands.md describes each command.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mountkeeper/mountkeeper/cmd/internal/cli"
	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/configs/watch"
	"github.com/mountkeeper/mountkeeper/internal/engine"
	"github.com/mountkeeper/mountkeeper/internal/hostmount"
	"github.com/mountkeeper/mountkeeper/internal/hostns"
	"github.com/mountkeeper/mountkeeper/internal/metrics"
	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/internal/ops"
	"github.com/mountkeeper/mountkeeper/internal/reexec"
	"github.com/mountkeeper/mountkeeper/nri"
)

// version is set at build time by the Makefile (git describe).
var version = "dev"

const usage = `usage: mountkeeper <command> [flags]

commands:
  nri       run the NRI plugin (containerd, CRI-O)
  render    print a config.json with the class mounts of a runtime class added (dry run)
  hook      run as an OCI runtime hook: hook prestart|createRuntime|precreate
  validate  check a config file
  check     check that this node can make the config's network filesystem mounts
  runtime   runtime configure: write containerd's or CRI-O's config for the runtime classes
  node      node cleanup: after the agent is stopped, release its mounts and remove its state
            (node wait-uninstall, node uninstalled: the chart's uninstall hook)
  status    show what the running plugin reports (its --listen address)
  version   print the version
`

// nriInHostNamespaces is the reexec entry hostns.Enter starts in the host's namespaces: the
// nri command again, which may not enter a second time.
const nriInHostNamespaces = "mountkeeper-nri-in-host-namespaces"

func init() {
	reexec.Register(nriInHostNamespaces, func() {
		os.Exit(cli.ExitStatus(runNRI(os.Args[1:], os.Stderr, true), os.Stderr))
	})
}

func main() {
	_ = netmount.MarkInheritedCloseOnExec() // inherited descriptors must not reach mount helpers
	if reexec.Init() {
		return
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 && launchedByRuntime() {
		// A pre-registered plugin is started from the runtime's plugin_path with no arguments
		// at all, its socket in the environment.
		args = []string{"nri"}
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "nri":
		err = runNRI(args[1:], stderr, false)
	case "render":
		err = runRender(args[1:], stdin, stdout, stderr)
	case "validate":
		err = runValidate(args[1:], stdout, stderr)
	case "check":
		err = runCheck(args[1:], stdout, stderr)
	case "runtime":
		err = runRuntime(args[1:], stdout, stderr)
	case "status":
		err = runStatus(args[1:], stdout, stderr)
	case "node":
		err = runNode(args[1:], stdout, stderr, false)
	case "hook":
		err = cli.RunHook("mountkeeper hook", args[1:], stdin, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "mountkeeper", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "mountkeeper: unknown command %q\n%s", args[0], usage)
		return 2
	}
	return cli.ExitStatus(err, stderr)
}

// launchedByRuntime says the NRI runtime started this process as a pre-registered plugin.
var launchedByRuntime = func() bool { return os.Getenv("NRI_PLUGIN_SOCKET") != "" }

// parseConfigOnly parses the flags of a command whose only flag is --config and loads it.
func parseConfigOnly(name string, args []string, stderr io.Writer) (*configs.Config, string, error) {
	fs := cli.NewFlags("mountkeeper "+name, stderr)
	_, loadConfig := cli.ConfigFlag(fs)
	if err := cli.Parse(fs, args); err != nil {
		return nil, "", err
	}
	return loadConfig()
}

// runNRI runs the plugin; inHost says this process is the one hostns.Enter started.
func runNRI(args []string, stderr io.Writer, inHost bool) error {
	fs := cli.NewFlags("mountkeeper nri", stderr)
	enter := fs.Bool(hostns.Flag, false, "enter the mount and cgroup namespaces of PID 1 first (a DaemonSet pod with hostPID: true, privileged)")
	hostPID := fs.String(hostns.PIDFlag, "1", "with --host-namespaces: whose namespaces to enter")
	configPath, loadConfig := cli.ConfigFlag(fs)
	socket := fs.String("socket", "", "NRI socket (default: the NRI default, /var/run/nri/nri.sock)")
	name := fs.String("name", "", "plugin name (default mountkeeper)")
	index := fs.String("index", "", "plugin index NN, orders plugins (default 10)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	format := fs.String("log-format", "text", "log format: text or json")
	listen := fs.String("listen", "", "serve /metrics, /healthz, /readyz and /status here: a loopback 127.0.0.1:PORT or unix:/path (default: off; the shipped unit and DaemonSet use "+ops.DefaultAddress+")")
	node := addMetricsFlags(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *enter && inHost {
		return fmt.Errorf("--%s: already re-executed in the host's namespaces", hostns.Flag)
	}
	if *listen != "" {
		if err := ops.CheckLocal(*listen); err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
	}
	if *enter {
		// The same command again, from the host's namespaces, without the flags that led here
		// (--config and the files of the node listener are handed over by hostns.Enter).
		files := node.containerFiles()
		var rest []string
		fs.Visit(func(f *flag.Flag) {
			_, handedOver := files[f.Name]
			switch {
			case f.Name == hostns.Flag, f.Name == hostns.PIDFlag, f.Name == "config", handedOver:
			default:
				rest = append(rest, "--"+f.Name+"="+f.Value.String())
			}
		})
		return hostns.Enter(nriInHostNamespaces, rest, *hostPID, *configPath, files)
	}
	log, err := cli.NewLogger(*level, *format, stderr)
	if err != nil {
		return err
	}
	// Read before the load: the watch started later reloads at once if the file differs by
	// then (a ConfigMap update landing between the two would otherwise go unseen until the next).
	loaded, _ := os.ReadFile(*configPath)
	cfg, from, err := loadConfig()
	if err != nil {
		return err
	}
	log.Infof("mountkeeper %s: config from %s, runtime classes %s", version, from, strings.Join(cfg.ClassNames(), ", "))
	pinned := flagSet(fs, "config")
	m := metrics.New(version)
	plugin := nri.NewPlugin(cfg, pinned, nri.NewHostChecker(), log, nri.WithMounter(
		func(cfg *configs.Config) (nri.Mounter, error) {
			mgr, err := netmount.NewManager(netmount.ConfigFrom(cfg, log))
			if err != nil {
				return nil, err
			}
			m.Register(metrics.NetworkMounts(mgr.Status, mgr.Totals))
			return managerMounter{mgr, log}, nil
		}), nri.WithMountsLeftBehind(func(cfg *configs.Config) bool { return netmount.LeftBehind(cfg.StateDir) }),
		nri.WithMetrics(m), nri.WithConfigSource(from))
	m.Register(metrics.GuardRefusals(plugin.StateDir, func(err error) { log.Warnf("metrics: guard refusals: %v", err) }))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *listen != "" {
		h := ops.Handlers{Metrics: m.Handler(), Ready: plugin.Ready, Healthy: plugin.Healthy, Status: func() any { return plugin.Status() }}
		go ops.ServeRetrying(ctx, *listen, func(l net.Listener) error { return ops.Serve(ctx, l, h) }, log.WithField("flag", "--listen"))
	}
	if err := node.start(ctx, m.Handler(), log); err != nil {
		// Only the node listener is off: containers must not lose their mounts because the
		// metrics cannot be served (a cluster Prometheus sees the target down).
		log.Errorf("the node listener for metrics is off: %v", err)
	}
	if _, err := os.Stat(from); err == nil {
		// A refused config is logged and counted by ReloadConfig itself.
		go watch.Reload(ctx, from, loaded, func(data []byte) { _ = plugin.ReloadConfig(data, from) }, log)
	}
	return nri.Run(ctx, plugin, nri.RunOptions{SocketPath: *socket, Name: *name, Index: *index, Log: log})
}

func runRender(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("mountkeeper render", stderr)
	_, loadConfig := cli.ConfigFlag(fs)
	class := fs.String("runtime-class", "", "CRI runtime handler whose class mounts to add (\"\" or default: the default class)")
	container := fs.String("container", "", "container name, for messages")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return err
	}
	doc, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("read config.json from stdin: %w", err)
	}
	// A dry run: network filesystems are shown where they would be mounted, and the host check
	// says whether they are mounted there now; subPath binds are left alone.
	eng := &engine.Engine{Config: cfg, Host: hostmount.NewChecker(hostmount.System{}), Network: dryRunNetwork{cfg.StateDir}}
	out, d, err := eng.Render(context.Background(), *class, engine.Container{Name: *container}, doc)
	switch {
	case err != nil:
		return err
	case !d.Configured:
		// Unlike the plugin, which leaves pods of unknown handlers alone, render fails: whoever
		// asks for a render of a class expects that class to exist.
		return engine.Refuse(*class, engine.Container{Name: *container},
			fmt.Errorf("no runtime class %q in the config (it has: %s)", d.Class, strings.Join(cfg.ClassNames(), ", ")))
	}
	_, err = stdout.Write(append(out, '\n'))
	return err
}

func runValidate(args []string, stdout, stderr io.Writer) error {
	cfg, from, err := parseConfigOnly("validate", args, stderr)
	if err != nil {
		return err
	}
	mounts := 0
	for _, rc := range cfg.RuntimeClasses {
		mounts += len(rc.Mounts)
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", from, w) // allowed, so validate still succeeds
	}
	fmt.Fprintf(stdout, "%s: OK: %d runtime classes (%s), %d mounts\n", from, len(cfg.RuntimeClasses), strings.Join(cfg.ClassNames(), ", "), mounts)
	return nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// dryRunNetwork names where each network filesystem would be mounted, without mounting it.
type dryRunNetwork struct{ stateDir string }

func (n dryRunNetwork) HostPath(_ context.Context, s netspec.Spec, _ string) (string, error) {
	return netmount.HostPath(n.stateDir, s), nil
}

func (dryRunNetwork) Release(string) {}
