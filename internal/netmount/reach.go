package netmount

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
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
// if one accepts, and nil where the dials cannot tell (no address to dial, a name that does
// not resolve here, which the helper may resolve another way, or a failure of the agent's own
// socket); an error naming each address and why only if every one refused, reset, was
// unreachable or did not answer in time. A dial is not the mount: a server that accepts
// connections may still fail it. ctx ending ends the dials and returns its error. Every dial
// has ended when it returns.
func dialAny(ctx context.Context, dial dialFunc, addrs []string, timeout time.Duration) error {
	if len(addrs) == 0 {
		return nil
	}
	errs := dialEach(ctx, dial, addrs, timeout)
	if err := ctx.Err(); err != nil {
		return err
	}
	failed := make([]string, len(addrs)) // in addrs' order: the same failure reads the same
	for i, err := range errs {
		if err == nil || !noConnection(err) {
			return nil
		}
		failed[i] = addrs[i] + ": " + dialReason(err)
	}
	return fmt.Errorf("the server accepts no connection (%s): no mount helper started until it does", strings.Join(failed, "; "))
}

// dialEach dials every one of addrs at once, each within timeout, closes what it gets, and
// returns each dial's error, in addrs' order; the first that connects ends the others. Every
// dial has ended when it returns.
func dialEach(ctx context.Context, dial dialFunc, addrs []string, timeout time.Duration) []error {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := dial(dctx, "tcp", addr)
			if err == nil {
				conn.Close()
				cancel() // the others need not finish
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errs
}

// dialReason is why a dial failed with err, without the address it names again:
// "connect: connection refused".
func dialReason(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		err = opErr.Err
	}
	return err.Error()
}

// noConnection says whether a dial's error means the server cannot be reached from here:
// refused, reset, unreachable, or no answer in time. Anything else (a name not resolved, a
// socket the agent may not open) says nothing about the server.
func noConnection(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return false
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}

// helperAnywayEvery: one heal attempt in this many starts its helper whatever the dial says
// (about once a minute at MaxHealBackoff), where the agent and the helper may see the server
// differently: the helper resolves names through NSS modules the agent's resolver lacks, or a
// firewall rule holds the agent's own sockets only.
const helperAnywayEvery = 12

// dialFirst says whether heal attempt number attempt dials the server before it starts a
// helper (see helperAnywayEvery).
func dialFirst(attempt int) bool { return attempt%helperAnywayEvery != 0 }
