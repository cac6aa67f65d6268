package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/mountkeeper/mountkeeper/cmd/internal/cli"
	"github.com/mountkeeper/mountkeeper/internal/nodecleanup"
)

// runNode is `mountkeeper node cleanup` (package nodecleanup).
func runNode(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "cleanup" {
		fmt.Fprintln(stderr, "usage: mountkeeper node cleanup [--config FILE] [--state-dir DIR] [--dry-run] [--host-namespaces]")
		return cli.ErrUsage
	}
	flags := cli.NewFlags("mountkeeper node cleanup", stderr)
	enter := flags.Bool(hostNamespacesName, false, "enter the mount and cgroup namespaces of PID 1 first (the DaemonSet's uninstall: a pod with hostPID: true, privileged)")
	hostPID := flags.String(hostNamespacesPIDName, "1", "with --host-namespaces: whose namespaces to enter")
	configPath, loadConfig := cli.ConfigFlag(flags)
	stateDir := flags.String("state-dir", "", "the agent's state directory (default: the config's stateDir)")
	dryRun := flags.Bool("dry-run", false, "say what would be done and change nothing")
	if err := cli.Parse(flags, args[1:]); err != nil {
		return err
	}
	if *enter {
		rest := []string{"--dry-run=" + strconv.FormatBool(*dryRun)}
		if *stateDir != "" {
			rest = append(rest, "--state-dir", *stateDir)
		}
		return enterHostNamespaces([]string{"node", "cleanup"}, rest, *hostPID, *configPath)
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
