package netmount

import (
	"context"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// TestDialAny: a server is reached when one of its addresses accepts a connection, on real
// loopback sockets; refused or silent everywhere, it is not, and the error names each address;
// a name that does not resolve here, or a socket the agent may not open, tells nothing; every
// dial has ended on return.
func TestDialAny(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	closed, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused2 := closed.Addr().String()
	closed.Close()
	var d net.Dialer
	var live atomic.Int32 // dials under way
	silent := func(ctx context.Context, _, _ string) (net.Conn, error) {
		live.Add(1)
		defer live.Add(-1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	notPermitted := func(context.Context, string, string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EPERM)}
	}
	tests := []struct {
		name    string
		ctx     context.Context
		dial    dialFunc
		addrs   []string
		wantErr []string // in the error; nil: reached (or cannot tell)
	}{
		{name: "accepts", dial: d.DialContext, addrs: []string{open.Addr().String()}},
		{name: "one of two accepts", dial: d.DialContext, addrs: []string{refused, open.Addr().String()}},
		{name: "refused", dial: d.DialContext, addrs: []string{refused}, wantErr: []string{"accepts no connection", refused + ": connect: connection refused"}},
		{name: "no address to dial", dial: silent},
		{name: "a name that does not resolve here", dial: d.DialContext, addrs: []string{"mountkeeper-test.invalid:2049"}},
		// In addrs' order, whichever dial ends first: the same failure reads the same.
		{name: "both refused", dial: d.DialContext, addrs: []string{refused, refused2},
			wantErr: []string{"(" + refused + ": connect: connection refused; " + refused2 + ": connect: connection refused)"}},
		{name: "silent", dial: silent, addrs: []string{"filer:2049", "filer:111"}, wantErr: []string{"accepts no connection (filer:2049: context deadline exceeded; filer:111: context deadline exceeded)"}},
		{name: "the agent may not open a socket", dial: notPermitted, addrs: []string{"filer:2049"}},
		{name: "the caller gives up", ctx: canceled, dial: silent, addrs: []string{"filer:2049"}, wantErr: []string{context.Canceled.Error()}},
		{name: "the caller gives up during a name's lookup", ctx: canceled, dial: d.DialContext, addrs: []string{"mountkeeper-test.invalid:2049"}, wantErr: []string{context.Canceled.Error()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			err := dialAny(ctx, tc.dial, tc.addrs, 100*time.Millisecond)
			if n := live.Load(); n != 0 {
				t.Errorf("%d dials still under way after dialAny returned", n)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("dialAny(%q): %v, want nil", tc.addrs, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("dialAny(%q): nil, want an error", tc.addrs)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("dialAny(%q): %v: does not say %q", tc.addrs, err, want)
				}
			}
		})
	}
}

// TestHealDialsTheServerFirst: while a kernel client's server refuses connections, the heal of
// its dead mount starts no mount helper, nor probes it, attempt after attempt, and says why; once it accepts
// them again, at another address, the mount is replaced by a new one. A FUSE filesystem's heal, whose daemon connects its own
// way, starts its helper as before.
func TestHealDialsTheServerFirst(t *testing.T) {
	tests := []struct {
		name        string
		spec        netspec.Spec
		wantHelpers bool // helpers started while the server refuses connections
	}{
		{name: "NFS", spec: netspec.Spec{Type: "nfs", Source: "filer:/export", Options: []string{"vers=4.2", "hard"}}},
		{name: "sshfs", spec: netspec.Spec{Type: "fuse.sshfs", Source: "root@filer:/srv"}, wantHelpers: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newServerFake()
			defer f.end()
			log, logged := logtest.NewNullLogger()
			log.SetLevel(logrus.DebugLevel)
			m, err := newManager(Config{StateDir: t.TempDir(), Grace: time.Hour, RetryBackoff: 10 * time.Millisecond,
				ProbeInterval: 20 * time.Millisecond, Log: log, Wanted: []netspec.Spec{tc.spec}}, f)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if _, err := acquireEventually(t, m, 5*time.Second, tc.spec, "ctr"); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			f.down, f.refuses = true, true
			f.mu.Unlock()
			eventually(t, "the mount found dead and a heal attempt made", func() bool {
				st := m.Status()
				return st[0].State != "mounted" && st[0].Attempt >= 2
			})
			probed := f.probeCount()
			// The fourth begun: the third's log line is written.
			eventually(t, "3 heal attempts made", func() bool { return m.Status()[0].Attempt >= 4 })
			if n := f.probeCount() - probed; !tc.wantHelpers && n > 0 {
				t.Errorf("%d probes of the dead mount while its server refuses connections: an attempt that cannot mount has no use for them", n)
			}
			helpers := stagingMounts(f.fakeSystem)
			st := m.Status()[0]
			t.Logf("server refusing connections: attempt %d, %d helpers started, %d dials; %s", st.Attempt, helpers, f.dialCount(), st.LastError)
			if tc.wantHelpers != (helpers > 0) {
				t.Errorf("%d mount helpers started by %d heal attempts while the server refuses connections; want some: %v", helpers, st.Attempt, tc.wantHelpers)
			}
			if !tc.wantHelpers && !strings.Contains(st.LastError, "accepts no connection") {
				t.Errorf("the dead mount's error does not say why no helper started: %s", st.LastError)
			}
			// Every attempt failed the same way: one warning, the rest at debug level.
			var warned, repeated int
			for _, l := range logged.AllEntries() {
				switch {
				case l.Level == logrus.WarnLevel && strings.HasPrefix(l.Message, "netmount: recovery attempt failed"):
					warned++
				case l.Level == logrus.DebugLevel && strings.HasPrefix(l.Message, "netmount: recovery attempt failed again"):
					repeated++
				}
			}
			if warned != 1 || repeated < 2 {
				t.Errorf("%d warnings and %d debug lines of failed recovery attempts (the same failure each time), want 1 and at least 2", warned, repeated)
			}
			// Back at another address, as after a failover: the dead mount's stat hangs on, and
			// only a new mount heals it.
			f.mu.Lock()
			f.down, f.refuses, f.addr = false, false, "10.0.0.2"
			f.mu.Unlock()
			eventually(t, "the mount replaced once the server accepts connections", func() bool {
				return m.Status()[0].State == "mounted" && m.Totals().Recoveries == 1
			})
			if stagingMounts(f.fakeSystem) == helpers {
				t.Error("the mount was recovered without a new mount")
			}
		})
	}
}

// stagingMounts counts the mounts f was asked to make at a heal's staging paths.
func stagingMounts(f *fakeSystem) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for target, calls := range f.mountCalls {
		if strings.Contains(target, "/staging/") {
			n += len(calls)
		}
	}
	return n
}

func (f *serverFake) probeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probed
}

func (f *serverFake) dialCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials
}

// TestDialFirst: one heal attempt in helperAnywayEvery starts its helper without the dial.
func TestDialFirst(t *testing.T) {
	var anyway []int
	for attempt := 1; attempt <= 3*helperAnywayEvery; attempt++ {
		if !dialFirst(attempt) {
			anyway = append(anyway, attempt)
		}
	}
	if want := []int{helperAnywayEvery, 2 * helperAnywayEvery, 3 * helperAnywayEvery}; !slices.Equal(anyway, want) {
		t.Errorf("attempts that start the helper without the dial: %v, want %v", anyway, want)
	}
}
