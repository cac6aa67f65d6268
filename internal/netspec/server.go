package netspec

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// defaultPorts are the TCP ports the servers of each type listen on.
var defaultPorts = map[string]int{"nfs": 2049, "nfs4": 2049, "cifs": 445, "glusterfs": 24007, "ceph": 3300, "fuse.sshfs": 22}

// ServerAddress is host:port of the server s mounts from: the host out of the source and the
// type's port, or the port= option where the type takes one (sshfs, nfs).
func (s Spec) ServerAddress() (string, error) {
	host := serverHost(s.Type, s.Source)
	if host == "" {
		return "", fmt.Errorf("cannot tell the server from source %q of type %s", RedactSource(s.Source), s.Type)
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
