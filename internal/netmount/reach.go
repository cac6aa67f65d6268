package netmount

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// dialFunc connects to addr over network within ctx: net.Dialer.DialContext in production.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// reachServer implements healer: whether the server of s accepts a TCP connection at one of
// the addresses its helper would connect to first (netspec.Spec.ConnectAddresses), within
// DialTimeout.
func (l *liveSystem) reachServer(ctx context.Context, s netspec.Spec) error {
	var d net.Dialer
	return dialAny(ctx, d.DialContext, s.ConnectAddresses(), DialTimeout)
}

// dialAny dials every one of addrs at once, each within timeout, and closes what it gets: nil
// as soon as one accepts, and nil where it cannot tell (no address to dial, or a name that
// does not resolve here: the helper may resolve it another way); otherwise an error naming
// each address and why (refused, unreachable, no answer). A dial is not the mount: a server
// that accepts connections may still fail it. ctx ending ends the dials and returns its
// error. Every dial has ended when it returns.
func dialAny(ctx context.Context, dial dialFunc, addrs []string, timeout time.Duration) error {
	if len(addrs) == 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		addr string
		err  error
	}
	results := make(chan result, len(addrs))
	for _, addr := range addrs {
		go func() {
			conn, err := dial(dctx, "tcp", addr)
			if err == nil {
				conn.Close()
				cancel() // the others need not finish
			}
			results <- result{addr, err}
		}()
	}
	var answered, unresolved bool
	var failed []string
	for range addrs {
		r := <-results
		var dnsErr *net.DNSError
		var opErr *net.OpError
		switch {
		case r.err == nil:
			answered = true
		case errors.As(r.err, &dnsErr):
			unresolved = true
		case errors.As(r.err, &opErr):
			failed = append(failed, r.addr+": "+opErr.Err.Error()) // "connect: connection refused"
		default:
			failed = append(failed, r.addr+": "+r.err.Error())
		}
	}
	if answered || unresolved {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("the server accepts no connection (%s): no mount helper started until it does", strings.Join(failed, "; "))
}
