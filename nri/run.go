package nri

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
)

// RunOptions say how to reach the runtime.
type RunOptions struct {
	SocketPath string // NRI socket; "" means the NRI default
	Name       string // plugin name; "" means "mountkeeper" (or the runtime's, when it launched us)
	Index      string // two-digit plugin index, orders plugins; "" means "10"
	Log        *logrus.Logger

	// Set by tests only: the backoff bounds (0 means 250ms and 5s) and a dialer that lets a
	// test cut the connection as a runtime restart does (nil means a plain unix socket).
	minBackoff, maxBackoff time.Duration
	dial                   func(socket string) (net.Conn, error)
}

// Run serves p until ctx ends. When the runtime goes away (a containerd restart) an external
// plugin reconnects with exponential backoff, so the runtime finds it again when it is back.
// A plugin the runtime launched itself (pre-registered, socket handed over in the environment)
// returns instead: the runtime starts a new copy when it restarts.
func Run(ctx context.Context, p *Plugin, o RunOptions) error {
	launched := os.Getenv(api.PluginSocketEnvVar) != ""
	opts := []stub.Option{stub.WithLogger(nriLogger{o.Log})}
	if !launched {
		opts = append(opts, stub.WithPluginName(cmp.Or(o.Name, "mountkeeper")), stub.WithPluginIdx(cmp.Or(o.Index, "10")))
		if o.SocketPath != "" {
			opts = append(opts, stub.WithSocketPath(o.SocketPath))
		}
		if o.dial != nil {
			opts = append(opts, stub.WithDialer(o.dial))
		}
	}
	backoff := newBackoff(o.minBackoff, o.maxBackoff)
	for {
		s, err := stub.New(p, opts...)
		if err != nil {
			return fmt.Errorf("create NRI stub: %w", err)
		}
		started := time.Now()
		err = s.Run(ctx)
		p.connected.Store(false)
		p.metrics.Connected(false, false)
		if ctx.Err() != nil {
			return nil
		}
		if launched {
			return fmt.Errorf("connection to the runtime that launched the plugin ended: %w", err)
		}
		if time.Since(started) > time.Minute {
			backoff.reset()
		}
		wait := backoff.next()
		o.Log.Warnf("NRI connection on %s ended (%v): reconnecting in %s", cmp.Or(o.SocketPath, api.DefaultSocketPath), describe(err), wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func describe(err error) error {
	if err == nil {
		return errors.New("closed by the runtime")
	}
	return err
}

// backoff doubles its wait from min up to max.
type backoff struct{ min, max, cur time.Duration }

func newBackoff(min, max time.Duration) *backoff {
	if min <= 0 {
		min = 250 * time.Millisecond
	}
	if max <= 0 {
		max = 5 * time.Second
	}
	return &backoff{min: min, max: max}
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }
