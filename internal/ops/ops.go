// Package ops serves what an operator and a DaemonSet's probes ask of a running plugin.
//
// Two listeners, each off unless asked for (a node agent opens no port nobody configured):
//   - the local one (Serve): /metrics, /healthz, /readyz (registered with the runtime, config
//     valid) and /status (JSON, what `mountkeeper status` prints), on a loopback TCP address
//     ("127.0.0.1:9658", for kubelet's probes and a node-local Prometheus agent) or a unix
//     socket ("unix:/path", root-only), which `mountkeeper status` reads by default. Anything
//     else is refused (CheckLocal): /status names hosts, paths and errors.
//   - the node one (ServeMetrics): /metrics alone, over TLS, to callers that Kubernetes
//     authenticates and authorizes (package kubeauth), for a cluster Prometheus.
//
// Both servers bound every connection (Limits): a slow or idle client is cut off, and at most
// MaxConns connections are open at once, so that no client can pile up goroutines and
// descriptors in an agent that runs on every node; a connection waiting idle gives its place
// to a new one, so idle connections cannot keep a caller out, and the node listener takes at
// most a few connections from one address.
package ops

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultAddress is where `mountkeeper status` looks, and what the shipped systemd unit listens
// on (the DaemonSet listens on 127.0.0.1:9658 for kubelet's probes).
const DefaultAddress = "unix:/run/mountkeeper/mountkeeper.sock"

// Handlers are what the endpoints answer from.
type Handlers struct {
	Metrics http.Handler
	// Ready returns nil when the plugin is registered with the runtime and serving.
	Ready func() error
	// Healthy returns nil while the plugin answers its requests in time (liveness); nil:
	// healthy while the process serves.
	Healthy func() error
	// Status returns the JSON document of /status.
	Status func() any
}

// Limits bound a server's connections.
type Limits struct {
	ReadHeader time.Duration // from accept to the end of the request's headers
	Read       time.Duration // the whole request
	Write      time.Duration // from the end of the request's headers to the end of the answer
	Idle       time.Duration // a kept-alive connection waiting for its next request
	// MaxConns connections are open at once: a new one displaces the oldest that is not in a
	// request (connLimit), or is closed if all are in one.
	MaxConns int
	// PerHost (if > 0) connections from one address at most; more are closed at once.
	PerHost int
}

// DefaultLimits suit probes and a Prometheus scrape: an answer takes milliseconds, a scrape
// interval is 15s or more (a connection idle longer is reopened), and a node has few callers.
var DefaultLimits = Limits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second, Idle: 60 * time.Second, MaxConns: 32}

// NodeLimits are DefaultLimits for the node listener, which anyone who reaches the node's
// address may open: a scraper needs one or two connections, so one address holds 4 at most.
var NodeLimits = func() Limits { l := DefaultLimits; l.PerHost = 4; return l }()

// CheckLocal says whether address may serve /status: a unix socket or a loopback TCP address.
func CheckLocal(address string) error {
	if strings.HasPrefix(address, "unix:") {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("listen address %q: %w (want 127.0.0.1:PORT or unix:/path)", address, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("listen address %q is not loopback: /status and the probes are served on loopback (127.0.0.1:PORT) or a unix socket only, since /status tells anyone who reaches it the node's mounts; for a cluster Prometheus use --metrics-listen, which serves /metrics alone behind Kubernetes authentication", address)
}

// Listen opens address: "unix:/path" (created 0600, its directory 0700) or host:port.
func Listen(address string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(address, "unix:"); ok {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		os.Remove(path) // a socket left by a killed predecessor
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, err
		}
		return l, os.Chmod(path, 0o600)
	}
	return net.Listen("tcp", address)
}

// Serve answers the local endpoints on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, h Handlers) error {
	return serve(ctx, l, LocalMux(h), nil, DefaultLimits)
}

// LocalMux routes the local endpoints.
func LocalMux(h Handlers) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h.Metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if h.Healthy != nil {
			if err := h.Healthy(); err != nil {
				http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(h.Status()) // an error means the client went away
	})
	return mux
}

// ServeMetrics answers /metrics alone on l, over TLS with the certificate cert gives at each
// handshake (MetricsCertificate), until ctx ends; guard decides who may scrape
// (kubeauth.Guard).
func ServeMetrics(ctx context.Context, l net.Listener, metrics http.Handler, guard func(http.Handler) http.Handler, cert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", guard(metrics))
	tc := &tls.Config{GetCertificate: cert, MinVersion: tls.VersionTLS12}
	return serve(ctx, l, mux, tc, NodeLimits)
}

// serve answers on l with handler, bounded by lim, until ctx ends; with tc, over TLS.
func serve(ctx context.Context, l net.Listener, handler http.Handler, tc *tls.Config, lim Limits) error {
	limited := limitConns(l, lim)
	srv := &http.Server{
		Handler:           handler,
		ConnState:         limited.connState,
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    16 << 10,
		TLSConfig:         tc,
	}
	l = limited
	if tc != nil {
		l = tls.NewListener(l, tc)
	}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut) // closing anyway
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Client returns an HTTP client and base URL for address, for `mountkeeper status` and probes.
func Client(address string) (*http.Client, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	if path, ok := strings.CutPrefix(address, "unix:"); ok {
		c.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		return c, "http://mountkeeper"
	}
	return c, "http://" + address
}
