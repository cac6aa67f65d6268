package netmount

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
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
func Check(env Env, scoper func() (Scoper, error), dial func(network, addr string, timeout time.Duration) (net.Conn, error), s Spec) []Finding {
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
	addr, err := ServerAddress(s)
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

// defaultPorts are the TCP ports the servers of each type listen on.
var defaultPorts = map[string]int{"nfs": 2049, "nfs4": 2049, "cifs": 445, "glusterfs": 24007, "ceph": 3300, "fuse.sshfs": 22}

// ServerAddress is host:port of the server s mounts from: the host out of the source and the
// type's port, or the port= option where the type takes one (sshfs, nfs).
func ServerAddress(s Spec) (string, error) {
	host := serverHost(s.Type, s.Source)
	if host == "" {
		return "", fmt.Errorf("cannot tell the server from source %q of type %s", redactSource(s.Source), s.Type)
	}
	port, known := defaultPorts[s.Type]
	for _, o := range s.Options {
		if v, ok := strings.CutPrefix(o, "port="); ok {
			p, err := strconv.Atoi(v)
			if err != nil {
				return "", fmt.Errorf("option port=%s is not a number", v)
			}
			port, known = p, true
		}
	}
	if !known {
		return "", fmt.Errorf("no known server port for type %s: give port=N", s.Type)
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port)), nil
}

func serverHost(typ, src string) string {
	if typ == "cifs" {
		host, _, _ := strings.Cut(strings.TrimPrefix(src, "//"), "/")
		if _, h, ok := strings.Cut(host, "@"); ok {
			host = h
		}
		return host
	}
	if typ == "ceph" {
		if _, after, ok := strings.Cut(src, "@"); ok && strings.Contains(after, "=") {
			return "" // user@fsid.fsname=/path: monitors come from ceph.conf
		}
	}
	if _, after, ok := strings.Cut(src, "@"); ok && typ != "ceph" {
		src = after
	}
	var host string
	if strings.HasPrefix(src, "[") {
		end := strings.Index(src, "]")
		if end < 0 {
			return ""
		}
		host = src[:end+1]
	} else {
		host, _, _ = strings.Cut(src, ":")
	}
	host, _, _ = strings.Cut(host, ",") // ceph: the first monitor
	return host
}
