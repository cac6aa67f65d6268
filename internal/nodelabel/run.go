package nodelabel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"
)

// Options configures Run.
type Options struct {
	Node     string
	Classes  []string // the config's classes with a handler (not "default")
	Interval time.Duration
	Out      io.Writer // a line per change and per new error
}

// Reconcile makes node's labels say which classes the running runtime has loaded, once, and
// returns what it changed ("" for nothing).
func Reconcile(ctx context.Context, h Handlers, n Nodes, node string, classes []string) (string, error) {
	handlers, err := h.Handlers(ctx)
	if err != nil {
		return "", err
	}
	current, err := n.Labels(ctx, node)
	if err != nil {
		return "", fmt.Errorf("node %s: %w", node, err)
	}
	patch := Patch(current, classes, handlers)
	if patch == nil {
		return "", nil
	}
	if err := n.PatchLabels(ctx, node, patch); err != nil {
		return "", fmt.Errorf("label node %s (%s): %w", node, Describe(patch), err)
	}
	return Describe(patch), nil
}

// Run reconciles every Interval until ctx ends: a runtime restarted with the handlers (by the
// operator, by --restart, on a node added later) labels the node within Interval. An error
// (the runtime restarting, the API server away) is said once and retried.
func Run(ctx context.Context, h Handlers, n Nodes, o Options) error {
	lastErr := ""
	for {
		changed, err := Reconcile(ctx, h, n, o.Node, o.Classes)
		switch {
		case err != nil && err.Error() != lastErr:
			lastErr = err.Error()
			fmt.Fprintf(o.Out, "node labels: %v (retrying every %s)\n", err, o.Interval)
		case err == nil && changed != "":
			lastErr = ""
			fmt.Fprintf(o.Out, "node %s: labels %s\n", o.Node, changed)
		case err == nil:
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.Interval):
		}
	}
}

// RemoveEverywhere removes every label with Prefix from every node (the uninstall) and says
// on which nodes.
func RemoveEverywhere(ctx context.Context, n Nodes, out io.Writer) error {
	nodes, err := n.List(ctx)
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		patch := RemoveAll(nodes[name])
		if patch == nil {
			continue
		}
		if err := n.PatchLabels(ctx, name, patch); err != nil {
			errs = append(errs, fmt.Errorf("node %s: remove %s: %w", name, Describe(patch), err))
			continue
		}
		fmt.Fprintf(out, "node %s: labels %s\n", name, Describe(patch))
	}
	return errors.Join(errs...)
}
