package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/mountkeeper/mountkeeper/cmd/internal/cli"
	"github.com/mountkeeper/mountkeeper/internal/hostns"
	"github.com/mountkeeper/mountkeeper/internal/nodecleanup"
	"github.com/mountkeeper/mountkeeper/internal/nodelabel"
	"github.com/mountkeeper/mountkeeper/internal/reexec"
	"github.com/mountkeeper/mountkeeper/internal/uninstallwait"
)

const nodeUsage = `usage: mountkeeper node cleanup [--config FILE] [--state-dir DIR] [--lock-wait D] [--dry-run] [--host-namespaces]
       mountkeeper node label --node NAME [--config FILE] [--runtime containerd|crio] [--distribution auto|NAME] [--cri-socket PATH] [--interval D] [--once] [--host-namespaces]
       mountkeeper node wait-uninstall --namespace NS --daemonset NAME [--timeout D] [--remove-node-labels]
       mountkeeper node uninstalled`

// nodeCleanupInHostNamespaces is the reexec entry hostns.Enter starts in the host's
// namespaces for `node cleanup --host-namespaces`: the command again, which may not enter a
// second time.
const nodeCleanupInHostNamespaces = "mountkeeper-node-cleanup-in-host-namespaces"

func init() {
	reexec.Register(nodeCleanupInHostNamespaces, func() {
		os.Exit(cli.ExitStatus(runNode(append([]string{"cleanup"}, os.Args[1:]...), os.Stdout, os.Stderr, true), os.Stderr))
	})
}

// runNode is `mountkeeper node cleanup` (package nodecleanup) and the two commands of the
// chart's uninstall hook: wait-uninstall (package uninstallwait) and uninstalled, what the
// uninstall DaemonSet's pod runs on a node once it is done. inHost says this process is the
// one hostns.Enter started.
func runNode(args []string, stdout, stderr io.Writer, inHost bool) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, nodeUsage)
		return cli.ErrUsage
	}
	switch args[0] {
	case "cleanup":
	case "label":
		return runNodeLabel(args[1:], stdout, stderr, inHost)
	case "wait-uninstall":
		return runWaitUninstall(args[1:], stdout, stderr)
	case "uninstalled":
		return runUninstalled(args[1:], stdout, stderr)
	default:
		fmt.Fprintln(stderr, nodeUsage)
		return cli.ErrUsage
	}
	flags := cli.NewFlags("mountkeeper node cleanup", stderr)
	enter := flags.Bool(hostns.Flag, false, "enter the mount and cgroup namespaces of PID 1 first (the DaemonSet's uninstall: a pod with hostPID: true, privileged)")
	hostPID := flags.String(hostns.PIDFlag, "1", "with --host-namespaces: whose namespaces to enter")
	configPath, loadConfig := cli.ConfigFlag(flags)
	stateDir := flags.String("state-dir", "", "the agent's state directory (default: the config's stateDir)")
	dryRun := flags.Bool("dry-run", false, "say what would be done and change nothing")
	lockWait := flags.Duration("lock-wait", nodecleanup.DefaultLockWait, "how long to wait for a stopping agent to release the state directory")
	if err := cli.Parse(flags, args[1:]); err != nil {
		return err
	}
	if *enter && inHost {
		return fmt.Errorf("--%s: already re-executed in the host's namespaces", hostns.Flag)
	}
	if *enter {
		rest := []string{"--dry-run=" + strconv.FormatBool(*dryRun), "--lock-wait=" + lockWait.String()}
		if *stateDir != "" {
			rest = append(rest, "--state-dir", *stateDir)
		}
		return hostns.Enter(nodeCleanupInHostNamespaces, rest, *hostPID, *configPath, nil)
	}
	if *stateDir == "" {
		cfg, _, err := loadConfig()
		if err != nil {
			return err
		}
		*stateDir = cfg.StateDir
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return nodecleanup.Run(ctx, nodecleanup.Options{StateDir: *stateDir, DryRun: *dryRun, LockWait: *lockWait, Out: stdout})
}

// runWaitUninstall is the chart's post-delete hook: it waits, bounded, until the uninstall
// DaemonSet is done on every node.
func runWaitUninstall(args []string, stdout, stderr io.Writer) error {
	flags := cli.NewFlags("mountkeeper node wait-uninstall", stderr)
	var o uninstallwait.Options
	flags.StringVar(&o.Namespace, "namespace", "", "the uninstall DaemonSet's namespace")
	flags.StringVar(&o.Name, "daemonset", "", "the uninstall DaemonSet")
	flags.StringVar(&o.Server, "server", "", "the API server (default: the pod's in-cluster address and ServiceAccount)")
	flags.DurationVar(&o.Timeout, "timeout", 4*time.Minute, "give up after this long and name the nodes not done")
	flags.DurationVar(&o.Interval, "interval", 2*time.Second, "time between two looks")
	removeLabels := flags.Bool("remove-node-labels", false, "then remove the labels "+nodelabel.Prefix+"* from every node (also when the wait failed: the RuntimeClasses are gone)")
	if err := cli.Parse(flags, args); err != nil {
		return err
	}
	if o.Namespace == "" || o.Name == "" || o.Timeout <= 0 || o.Interval <= 0 {
		fmt.Fprintln(stderr, "mountkeeper node wait-uninstall: --namespace and --daemonset are needed, --timeout and --interval positive")
		return cli.ErrUsage
	}
	o.Out = stdout
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := uninstallwait.Wait(ctx, o)
	if *removeLabels {
		err = errors.Join(err, removeNodeLabels(ctx, o.Server, stdout))
	}
	return err
}

// runUninstalled says the node is uninstalled and waits for SIGTERM: the main container of
// the uninstall DaemonSet's pod, Ready once its init containers (unconfigure, cleanup) have
// succeeded (the image has no shell or sleep).
func runUninstalled(args []string, stdout, stderr io.Writer) error {
	if err := cli.Parse(cli.NewFlags("mountkeeper node uninstalled", stderr), args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "mountkeeper: this node is uninstalled (runtime unconfigure and node cleanup succeeded)")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}
