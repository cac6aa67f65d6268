package ops

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the connections the server holds open, and the most at once.
type countingListener struct {
	net.Listener
	open, most atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// TestIdleConnectionsCannotPileUp opens many connections that send nothing and many that make
// one request and then sit idle: the server never holds more than MaxConns at once, closes
// every one of them (the client reads EOF), and still answers a new caller afterwards.
// Without the connection cap all 60 are held at once; without the idle and header timeouts
// none is ever closed.
func TestIdleConnectionsCannotPileUp(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: inner}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	lim := Limits{ReadHeader: 200 * time.Millisecond, Read: time.Second, Write: time.Second, Idle: 200 * time.Millisecond, MaxConns: 4}
	h := Handlers{Metrics: http.NotFoundHandler(), Ready: func() error { return nil }, Status: func() any { return "ok" }}
	go func() { served <- serve(ctx, l, LocalMux(h), nil, lim) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	addr := inner.Addr().String()

	const silent, kept = 40, 20
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range silent {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for range kept {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	// Every connection ends closed by the server: reading it gives EOF (or a reset), never a
	// connection still open at the deadline.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %d still open after 60s: idle connections pile up", i)
		}
	}
	// One more than MaxConns for the moment between accepting a connection and closing the one
	// it displaces (or itself).
	if most := l.most.Load(); most > int64(lim.MaxConns)+1 || most < 1 {
		t.Errorf("the server held %d connections at once, want at most %d", most, lim.MaxConns+1)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("a new caller after the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a new caller after the flood: %s", resp.Status)
	}
	t.Logf("%d connections, at most %d held at once", silent+kept, l.most.Load())
}

func TestCheckLocal(t *testing.T) {
	for _, tc := range []struct {
		address string
		ok      bool
	}{
		{"127.0.0.1:9658", true},
		{"[::1]:9658", true},
		{"localhost:9658", true},
		{"unix:/run/mountkeeper/mountkeeper.sock", true},
		{"0.0.0.0:9658", false},
		{":9658", false},
		{"10.0.0.5:9658", false},
		{"node.example:9658", false},
		{"9658", false},
	} {
		if err := CheckLocal(tc.address); (err == nil) != tc.ok {
			t.Errorf("CheckLocal(%q) = %v, want ok %v", tc.address, err, tc.ok)
		}
	}
}

// TestIdleConnectionsDoNotKeepAScraperOut: idle connections (TCP open, no TLS handshake) from
// one address, or each from its own address, more than the server takes at once, do not keep a
// scraper out of the TLS listener: it is answered while they are still open (the timeouts
// here are long, so no idle connection has been cut by one). Without the per-address bound
// and the displacement of waiting connections, the scraper waits in the kernel's backlog
// until a timeout frees a place.
func TestIdleConnectionsDoNotKeepAScraperOut(t *testing.T) {
	cert, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	lim := Limits{ReadHeader: time.Hour, Read: time.Hour, Write: time.Hour, Idle: time.Hour, MaxConns: 8, PerHost: 2}
	for name, from := range map[string]func(i int) net.IP{
		"one address":  func(int) net.IP { return net.IPv4(127, 0, 0, 2) },
		"40 addresses": func(i int) net.IP { return net.IPv4(127, 0, 1, byte(i+1)) },
	} {
		t.Run(name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			mux := http.NewServeMux()
			mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "metrics\n") })
			go func() { served <- serve(ctx, l, mux, tc, lim) }()
			defer func() {
				cancel()
				if err := <-served; err != nil {
					t.Error(err)
				}
			}()
			var idle []net.Conn
			defer func() {
				for _, c := range idle {
					c.Close()
				}
			}()
			for i := range 40 {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from(i)}}
				c, err := d.Dial("tcp", l.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				idle = append(idle, c)
			}
			client := &http.Client{Timeout: 20 * time.Second, // a hang guard: the idle connections stay for an hour
				Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
			for i := range 3 {
				resp, err := client.Get("https://" + l.Addr().String() + "/metrics")
				if err != nil {
					t.Fatalf("scrape %d beside 40 idle connections: %v", i+1, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("scrape %d: %s", i+1, resp.Status)
				}
			}
		})
	}
}
