package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mountkeeper/mountkeeper/cmd/internal/cli"
	"github.com/mountkeeper/mountkeeper/internal/hostns"
	"github.com/mountkeeper/mountkeeper/internal/kubeauth"
	"github.com/mountkeeper/mountkeeper/internal/nodelabel"
	"github.com/mountkeeper/mountkeeper/internal/reexec"
	"github.com/mountkeeper/mountkeeper/internal/runtimeconfig"
)

// nodeLabelInHostNamespaces is the reexec entry of `node label --host-namespaces`: the host's
// mount namespace shows the runtime's CRI socket and the files that detect the distribution.
const nodeLabelInHostNamespaces = "mountkeeper-node-label-in-host-namespaces"

func init() {
	reexec.Register(nodeLabelInHostNamespaces, func() {
		os.Exit(cli.ExitStatus(runNodeLabel(os.Args[1:], os.Stdout, os.Stderr, true), os.Stderr))
	})
}

// runNodeLabel is `mountkeeper node label`: it keeps the node's labels
// runtime-handler.mountkeeper.io/<class> in step with the handlers the running runtime
// reports (package nodelabel).
func runNodeLabel(args []string, stdout, stderr io.Writer, inHost bool) error {
	flags := cli.NewFlags("mountkeeper node label", stderr)
	enter := flags.Bool(hostns.Flag, false, "enter the mount and cgroup namespaces of PID 1 first (the DaemonSet's node-label container: hostPID, privileged)")
	hostPID := flags.String(hostns.PIDFlag, "1", "with --host-namespaces: whose namespaces to enter")
	configPath, loadConfig := cli.ConfigFlag(flags)
	node := flags.String("node", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	runtime := flags.String("runtime", "containerd", "the runtime: containerd or crio")
	distribution := flags.String("distribution", "auto", "containerd: the node's distribution, whose CRI socket is the default: auto, "+fmt.Sprint(runtimeconfig.DistributionNames()))
	socket := flags.String("cri-socket", "", "the running runtime's CRI socket (default: the distribution's, or "+runtimeconfig.CRIOSocket+")")
	interval := flags.Duration("interval", 10*time.Second, "time between two looks at the runtime's handlers")
	once := flags.Bool("once", false, "look once and exit")
	api := flags.String("kube-api", kubeauth.InClusterServer(), "the API server, https://host:port (default: from KUBERNETES_SERVICE_HOST/PORT)")
	tokenFile := flags.String("kube-token-file", kubeauth.DefaultTokenFile, "the bearer token for the API server, read at every call")
	caFile := flags.String("kube-ca-file", kubeauth.DefaultCAFile, "the API server's CA")
	if err := cli.Parse(flags, args); err != nil {
		return err
	}
	if *node == "" || *interval <= 0 || (*runtime != "containerd" && *runtime != "crio") {
		fmt.Fprintln(stderr, "mountkeeper node label: --node (or $NODE_NAME) is needed, --interval positive, --runtime containerd or crio")
		return cli.ErrUsage
	}
	if *enter {
		if inHost {
			return fmt.Errorf("--%s: already re-executed in the host's namespaces", hostns.Flag)
		}
		var rest []string
		flags.Visit(func(f *flag.Flag) {
			switch f.Name {
			case hostns.Flag, hostns.PIDFlag, "config", "kube-token-file", "kube-ca-file":
			default:
				rest = append(rest, "--"+f.Name+"="+f.Value.String())
			}
		})
		// Defaults from the pod's environment, which the re-executed process keeps anyway.
		rest = append(rest, "--node="+*node, "--kube-api="+*api)
		return hostns.Enter(nodeLabelInHostNamespaces, rest, *hostPID, *configPath, map[string]string{"kube-token-file": *tokenFile, "kube-ca-file": *caFile})
	}
	if *socket == "" {
		*socket = runtimeconfig.CRIOSocket
		if *runtime == "containerd" {
			d, err := runtimeconfig.ResolveDistribution(*distribution, runtimeconfig.PathExists)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return cli.ErrUsage
			}
			*socket = d.CRISocket
		}
	}
	cfg, _, err := loadConfig()
	if err != nil {
		return err
	}
	classes, err := runtimeconfig.HandlerClasses(cfg)
	if err != nil {
		return err
	}
	if *api == "" {
		return fmt.Errorf("node label: no API server: --kube-api https://host:port (in a pod, KUBERNETES_SERVICE_HOST gives it)")
	}
	client, err := kubeauth.NewClient(*api, *tokenFile, *caFile)
	if err != nil {
		return fmt.Errorf("node label: %w (--kube-api, --kube-token-file, --kube-ca-file)", err)
	}
	cri, err := nodelabel.NewCRI(*socket)
	if err != nil {
		return err
	}
	defer cri.Close()
	nodes := nodelabel.API{C: client}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *once {
		changed, err := nodelabel.Reconcile(ctx, cri, nodes, *node, classes)
		if err == nil {
			fmt.Fprintf(stdout, "node %s: labels %s\n", *node, cmp.Or(changed, "unchanged"))
		}
		return err
	}
	fmt.Fprintf(stdout, "node %s: labelling %s<class> for classes %v as %s reports their handlers (CRI %s)\n", *node, nodelabel.Prefix, classes, *runtime, *socket)
	return nodelabel.Run(ctx, cri, nodes, nodelabel.Options{Node: *node, Classes: classes, Interval: *interval, Out: stdout})
}

// removeNodeLabels is the uninstall's: every node loses the labels, with the waiter's
// ServiceAccount (server "": the pod's in-cluster address).
func removeNodeLabels(ctx context.Context, server string, out io.Writer) error {
	server = cmp.Or(server, kubeauth.InClusterServer())
	client, err := kubeauth.NewClient(server, kubeauth.DefaultTokenFile, kubeauth.DefaultCAFile)
	if err != nil {
		return fmt.Errorf("remove node labels: %w", err)
	}
	return nodelabel.RemoveEverywhere(ctx, nodelabel.API{C: client}, out)
}
