package ops

import (
	"context"
	"net"
	"time"

	"github.com/sirupsen/logrus"
)

// ListenRetry is how long ServeRetrying waits before it tries to open its listener again.
const ListenRetry = 2 * time.Second

// ServeRetrying opens address (Listen) and serves on it with serve until ctx ends. A listener
// that cannot be opened (the port or socket still held by a predecessor that is going away)
// is tried again every ListenRetry, not given up: the caller keeps serving the runtime
// meanwhile, since without the plugin containers lose their mounts, and the operator's
// endpoints come once the address is free. An error of serve itself is logged and ends it.
func ServeRetrying(ctx context.Context, address string, serve func(net.Listener) error, log logrus.FieldLogger) {
	serveRetrying(ctx, address, serve, log, ListenRetry)
}

func serveRetrying(ctx context.Context, address string, serve func(net.Listener) error, log logrus.FieldLogger, every time.Duration) {
	for {
		l, err := Listen(address)
		if err == nil {
			if err := serve(l); err != nil {
				log.Errorf("serving %s: %v", address, err)
			}
			return
		}
		log.Warnf("listen %s: %v: retrying in %s (the plugin serves the runtime meanwhile)", address, err, every)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
