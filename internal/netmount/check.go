package netmount

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// Finding is one line of `mountkeeper check`: what was checked, and OK or what to do.
type Finding struct {
	What string // "helper and kernel", "scope", "server"
	OK   bool
	Text string // what was found, or the fix
}

// DialTimeout bounds the reachability check of a server.
const DialTimeout = 3 * time.Second

// Check tells whether the node can mount s: the helper and kernel support (Preflight's own
// messages, as at runtime), the scope mechanism a mount would run in, and whether the server
// answers on TCP. dial is net.DialTimeout in production.
func Check(env Env, scoper func() (Scoper, error), dial func(network, addr string, timeout time.Duration) (net.Conn, error), s netspec.Spec) []Finding {
	var out []Finding
	if err := Preflight(env, s); err != nil {
		var pe *PreflightError
		if errors.As(err, &pe) {
			for _, p := range pe.Problems {
				out = append(out, Finding{What: "helper and kernel", Text: p})
			}
		} else {
			out = append(out, Finding{What: "helper and kernel", Text: err.Error()})
		}
	} else {
		out = append(out, Finding{What: "helper and kernel", OK: true, Text: "mount helper and kernel support present"})
	}
	if sc, err := scoper(); err != nil {
		out = append(out, Finding{What: "scope", Text: err.Error()})
	} else {
		out = append(out, Finding{What: "scope", OK: true, Text: "mounts run in their own " + sc.Name() + " scope"})
	}
	addr, err := s.ServerAddress()
	if err != nil {
		return append(out, Finding{What: "server", Text: err.Error()})
	}
	conn, err := dial("tcp", addr, DialTimeout)
	if err != nil {
		return append(out, Finding{What: "server", Text: fmt.Sprintf("%s does not answer on TCP within %s: %v: check the server and the network path", addr, DialTimeout, err)})
	}
	conn.Close()
	return append(out, Finding{What: "server", OK: true, Text: addr + " answers"})
}
