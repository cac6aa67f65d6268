package uninstallwait

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/kubeauth"
)

// Options configures Wait.
type Options struct {
	// Server is the API server (https://host:port); "" means the pod's in-cluster address.
	Server string
	// TokenFile and CAFile are the pod's ServiceAccount credentials; "" means the defaults.
	TokenFile, CAFile string
	// Namespace and Name name the uninstall DaemonSet.
	Namespace, Name string
	// Timeout bounds the wait; Interval is the time between two looks.
	Timeout, Interval time.Duration
	// Out receives the progress and the final report.
	Out io.Writer
}

// Wait waits until the uninstall DaemonSet has finished on every node, then deletes it (its
// pods only idle once done). On timeout it fails naming each node not finished and what its
// pod last said; the DaemonSet then stays, and its pods finish by themselves once what they
// wait for is gone (kubelet retries a failed init container).
func Wait(ctx context.Context, o Options) error {
	c, err := newClient(o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	dsPath := "/apis/apps/v1/namespaces/" + url.PathEscape(o.Namespace) + "/daemonsets/" + url.PathEscape(o.Name)
	var last Progress
	var lastErr error
	said := ""
	for {
		p, err := look(ctx, c, o.Namespace, dsPath)
		switch {
		case err != nil:
			lastErr = err
		case p.Done:
			fmt.Fprintf(o.Out, "uninstalled on every node (%d)\n", p.Desired)
			if err := c.Do(ctx, http.MethodDelete, dsPath, map[string]any{"propagationPolicy": "Background"}, nil); err != nil {
				return fmt.Errorf("uninstalled on every node, but the uninstall DaemonSet %s/%s stays: %w (delete it: kubectl -n %s delete daemonset %s)",
					o.Namespace, o.Name, err, o.Namespace, o.Name)
			}
			return nil
		default:
			last, lastErr = p, nil
			if now := fmt.Sprintf("%d of %d nodes uninstalled", p.Ready, p.Desired); now != said {
				fmt.Fprintln(o.Out, now)
				said = now
			}
		}
		select {
		case <-ctx.Done():
			return timedOut(o, last, lastErr)
		case <-time.After(o.Interval):
		}
	}
}

// timedOut is Wait's report when time is up.
func timedOut(o Options, p Progress, lastErr error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the uninstall has not finished on every node after %v: %d of %d done", o.Timeout, p.Ready, p.Desired)
	for _, line := range p.Pending {
		b.WriteString("\n  " + line)
	}
	if lastErr != nil {
		fmt.Fprintf(&b, "\n  last look at the API failed: %v", lastErr)
	}
	fmt.Fprintf(&b, "\nA node refuses while a container still uses what the uninstall would remove (it names them): "+
		"remove those pods; the DaemonSet %s/%s stays and finishes each node by itself once they are gone "+
		"(kubectl -n %s get pods -l app.kubernetes.io/component=uninstall). Then delete it: kubectl -n %s delete daemonset %s",
		o.Namespace, o.Name, o.Namespace, o.Namespace, o.Name)
	return errors.New(b.String())
}

// look reads the DaemonSet and its pods once.
func look(ctx context.Context, c *kubeauth.Client, namespace, dsPath string) (Progress, error) {
	var ds DaemonSet
	if err := c.Do(ctx, http.MethodGet, dsPath, nil, &ds); err != nil {
		return Progress{}, err
	}
	var sel []string
	for _, k := range slices.Sorted(maps.Keys(ds.Spec.Selector.MatchLabels)) {
		sel = append(sel, k+"="+ds.Spec.Selector.MatchLabels[k])
	}
	var pods struct{ Items []Pod }
	path := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/pods?labelSelector=" + url.QueryEscape(strings.Join(sel, ","))
	if err := c.Do(ctx, http.MethodGet, path, nil, &pods); err != nil {
		return Progress{}, err
	}
	return Assess(ds, pods.Items), nil
}

// newClient is the API client of the pod's ServiceAccount, or of the given server and files.
func newClient(o Options) (*kubeauth.Client, error) {
	server := o.Server
	if server == "" {
		if server = kubeauth.InClusterServer(); server == "" {
			return nil, errors.New("no API server: not in a pod (KUBERNETES_SERVICE_HOST unset) and no --server")
		}
	}
	return kubeauth.NewClient(server, cmp.Or(o.TokenFile, kubeauth.DefaultTokenFile), cmp.Or(o.CAFile, kubeauth.DefaultCAFile))
}
