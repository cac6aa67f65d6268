// Package ops serves what an operator and a DaemonSet's probes ask of a running plugin, on one
// listener: /metrics (Prometheus), /healthz (the process serves), /readyz (registered with the
// runtime, config valid) and /status (JSON, what `mountkeeper status` prints).
//
// The listener is off unless asked for: a node agent opens no port nobody configured. Give a
// loopback TCP address for Prometheus ("127.0.0.1:9658") or a unix socket ("unix:/path",
// root-only), which `mountkeeper status` reads by default.
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	// Status returns the JSON document of /status.
	Status func() any
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

// Serve answers on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, h Handlers) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h.Metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
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
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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
