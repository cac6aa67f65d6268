package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/mountkeeper/mountkeeper/cmd/internal/cli"
	"github.com/mountkeeper/mountkeeper/internal/hostns"
	"github.com/mountkeeper/mountkeeper/internal/nodecleanup"
	"github.com/mountkeeper/mountkeeper/internal/reexec"
)

// nodeCleanupInHostNamespaces is the reexec entry hostns.Enter starts in the host's
// namespaces for `node cleanup --host-namespaces`: the command again, which may not enter a
// second time.
const nodeCleanupInHostNamespaces = "mountkeeper-node-cleanup-in-host-namespaces"

func init() {
	reexec.Register(nodeCleanupInHostNamespaces, func() {
		os.Exit(cli.ExitStatus(runNode(append([]string{"cleanup"}, os.Args[1:]...), os.Stdout, os.Stderr, true), os.Stderr))
	})
}

// runNode is `mountkeeper node cleanup` (package nodecleanup); inHost says this process is
// the one hostns.Enter started.
func runNode(args []string, stdout, stderr io.Writer, inHost bool) error {
	if len(args) == 0 || args[0] != "cleanup" {
		fmt.Fprintln(stderr, "usage: mountkeeper node cleanup [--config FILE] [--state-dir DIR] [--dry-run] [--host-namespaces]")
		return cli.ErrUsage
	}
	flags := cli.NewFlags("mountkeeper node cleanup", stderr)
	enter := flags.Bool(hostns.Flag, false, "enter the mount and cgroup namespaces of PID 1 first (the DaemonSet's uninstall: a pod with hostPID: true, privileged)")
	hostPID := flags.String(hostns.PIDFlag, "1", "with --host-namespaces: whose namespaces to enter")
	configPath, loadConfig := cli.ConfigFlag(flags)
	stateDir := flags.String("state-dir", "", "the agent's state directory (default: the config's stateDir)")
	dryRun := flags.Bool("dry-run", false, "say what would be done and change nothing")
	if err := cli.Parse(flags, args[1:]); err != nil {
		return err
	}
	if *enter && inHost {
		return fmt.Errorf("--%s: already re-executed in the host's namespaces", hostns.Flag)
	}
	if *enter {
		rest := []string{"--dry-run=" + strconv.FormatBool(*dryRun)}
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
	return nodecleanup.Run(ctx, nodecleanup.Options{StateDir: *stateDir, DryRun: *dryRun, Out: stdout})
}
