package netmount

import (
	"context"
	"errors"
	"fmt"
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
// answers on TCP where its helper would connect (netspec.Spec.ConnectAddresses, as the heal
// dials it), or, where that cannot be told, at the address its source names. dial is
// net.Dialer.DialContext in production.
func Check(env Env, scoper func() (Scoper, error), dial dialFunc, s netspec.Spec) []Finding {
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
	addrs := s.ConnectAddresses()
	if len(addrs) == 0 {
		addr, err := s.ServerAddress()
		if err != nil {
			return append(out, Finding{What: "server", Text: err.Error()})
		}
		addrs = []string{addr}
	}
	errs := dialEach(context.Background(), dial, addrs, DialTimeout)
	for i, err := range errs {
		if err == nil {
			return append(out, Finding{What: "server", OK: true, Text: addrs[i] + " answers"})
		}
	}
	// "a does not answer on TCP within 3s (why), nor b (why)"
	failed := fmt.Sprintf("%s does not answer on TCP within %s (%s)", addrs[0], DialTimeout, dialReason(errs[0]))
	for i := 1; i < len(addrs); i++ {
		failed += fmt.Sprintf(", nor %s (%s)", addrs[i], dialReason(errs[i]))
	}
	return append(out, Finding{What: "server", Text: failed + ": check the server and the network path"})
}
