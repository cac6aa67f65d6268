package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/internal/kubeauth"
	"github.com/mountkeeper/mountkeeper/internal/ops"
)

// metricsFlags are the flags of the node listener: /metrics for a cluster Prometheus, behind
// Kubernetes authentication and authorization (docs/metrics.md).
type metricsFlags struct {
	listen, cert, key, api, tokenFile, caFile *string
	timeout, cache                            *time.Duration
}

func addMetricsFlags(fs *flag.FlagSet) *metricsFlags {
	return &metricsFlags{
		listen:    fs.String("metrics-listen", "", "also serve /metrics alone here (host:port, e.g. the node's address), over HTTPS, to callers Kubernetes allows to get /metrics (TokenReview and SubjectAccessReview; default: off)"),
		cert:      fs.String("metrics-tls-cert", "", "with --metrics-listen: certificate file, PEM, read again at each connection (default: a self-signed one made at start)"),
		key:       fs.String("metrics-tls-key", "", "with --metrics-listen: the certificate's key file"),
		api:       fs.String("kube-api", kubeauth.InClusterServer(), "with --metrics-listen: the Kubernetes API server, https://host:port (default: from KUBERNETES_SERVICE_HOST/PORT)"),
		tokenFile: fs.String("kube-token-file", kubeauth.DefaultTokenFile, "with --metrics-listen: the agent's bearer token for the API server, read at every call"),
		caFile:    fs.String("kube-ca-file", kubeauth.DefaultCAFile, "with --metrics-listen: the API server's CA"),
		timeout:   fs.Duration("metrics-auth-timeout", 5*time.Second, "with --metrics-listen: bound of each TokenReview and SubjectAccessReview (the scrape gets 503 past it)"),
		cache:     fs.Duration("metrics-auth-cache", time.Minute, "with --metrics-listen: how long an allowed token is remembered (a refused one: 10s)"),
	}
}

// containerFiles are the files the flags name, by flag: paths in the agent's container, which
// --host-namespaces hands over as descriptors (none without --metrics-listen).
func (f *metricsFlags) containerFiles() map[string]string {
	if *f.listen == "" {
		return nil
	}
	files := map[string]string{"kube-token-file": *f.tokenFile, "kube-ca-file": *f.caFile}
	if *f.cert != "" {
		files["metrics-tls-cert"], files["metrics-tls-key"] = *f.cert, *f.key
	}
	return files
}

// start checks the flags and serves /metrics (h) on the node listener until ctx ends; an error
// means the flags or files are wrong, and nothing is served there.
func (f *metricsFlags) start(ctx context.Context, h http.Handler, log *logrus.Logger) error {
	if *f.listen == "" {
		return nil
	}
	if *f.api == "" {
		return fmt.Errorf("--metrics-listen needs the API server to check callers: --kube-api https://host:port (in a pod, KUBERNETES_SERVICE_HOST gives it)")
	}
	reviewer, err := kubeauth.NewAPIReviewer(*f.api, *f.tokenFile, *f.caFile)
	if err != nil {
		return fmt.Errorf("--metrics-listen: %w (--kube-api, --kube-token-file, --kube-ca-file)", err)
	}
	cert, err := ops.MetricsCertificate(*f.cert, *f.key)
	if err != nil {
		return fmt.Errorf("--metrics-tls-cert/--metrics-tls-key: %w", err)
	}
	guard := kubeauth.Guard(reviewer, kubeauth.Options{
		Verb: "get", Path: "/metrics", Timeout: *f.timeout, AllowTTL: *f.cache,
		Failed: func(err error) { log.Warnf("--metrics-listen: a scrape got 503: %v", err) },
	})
	go ops.ServeRetrying(ctx, *f.listen, func(l net.Listener) error { return ops.ServeMetrics(ctx, l, h, guard, cert) }, log.WithField("flag", "--metrics-listen"))
	return nil
}
