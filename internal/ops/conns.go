package ops

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
)

// connLimit is a server's listener bounded by Limits: at most max connections open at once
// and perHost (if > 0) from one address; a connection past perHost is closed at once. When max
// are open, a new connection displaces the oldest one that is not in a request (still in its
// TLS handshake or headers, or idle between requests), or is closed itself if every one is in
// a request. So idle connections, whoever holds them, cannot keep a caller out: a waiting
// connection is cut as soon as someone needs its place, rather than after its timeout.
type connLimit struct {
	net.Listener
	max, perHost int

	mu     sync.Mutex
	open   map[*limitedConn]struct{}
	byHost map[string]int
	seq    uint64
}

type limitedConn struct {
	net.Conn
	l    *connLimit
	host string
	seq  uint64 // accept order
	busy bool   // in a request; guarded by l.mu
	once sync.Once
}

func limitConns(l net.Listener, lim Limits) *connLimit {
	return &connLimit{Listener: l, max: lim.MaxConns, perHost: lim.PerHost, open: map[*limitedConn]struct{}{}, byHost: map[string]int{}}
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := c.RemoteAddr().String()
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		l.mu.Lock()
		if l.perHost > 0 && l.byHost[host] >= l.perHost {
			l.mu.Unlock()
			c.Close()
			continue
		}
		var displaced *limitedConn
		if len(l.open) >= l.max {
			if displaced = l.oldestWaitingLocked(); displaced == nil {
				l.mu.Unlock()
				c.Close() // every place is in a request, each bounded by the server's timeouts
				continue
			}
			l.forgetLocked(displaced)
		}
		l.seq++
		lc := &limitedConn{Conn: c, l: l, host: host, seq: l.seq}
		l.open[lc] = struct{}{}
		l.byHost[host]++
		l.mu.Unlock()
		if displaced != nil {
			displaced.Conn.Close()
		}
		return lc, nil
	}
}

func (l *connLimit) oldestWaitingLocked() *limitedConn {
	var oldest *limitedConn
	for c := range l.open {
		if !c.busy && (oldest == nil || c.seq < oldest.seq) {
			oldest = c
		}
	}
	return oldest
}

func (l *connLimit) forgetLocked(c *limitedConn) {
	if _, ok := l.open[c]; !ok {
		return
	}
	delete(l.open, c)
	if l.byHost[c.host]--; l.byHost[c.host] <= 0 {
		delete(l.byHost, c.host)
	}
}

// connState is the server's ConnState: it tells which connections are in a request.
func (l *connLimit) connState(c net.Conn, s http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, ok := c.(*limitedConn)
	if !ok || s != http.StateActive && s != http.StateIdle {
		return
	}
	l.mu.Lock()
	lc.busy = s == http.StateActive
	l.mu.Unlock()
}

func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.forgetLocked(c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
