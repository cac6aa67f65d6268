package netspec

import (
	"cmp"
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

// ConnectAddresses are the TCP addresses (host:port) a kernel client's helper connects to
// first when it mounts s: when none of them accepts a connection, the mount fails without
// reaching the server. NFS: its port (port=, or 2049) and, unless v4 is asked for without a
// port or with port=0 (rpcbind's choice), rpcbind's (111), which mount.nfs asks first; CIFS:
// port=, or 445 and then 139 as the kernel client tries them, at ip= (or addr=) if given,
// where the client connects instead of the share's host. More addresses only make a "no
// connection" less likely: any one that accepts will do. nil where that cannot be told from s
// alone: FUSE filesystems (their daemon connects, its own way), CephFS (several monitors, two
// protocols), a UDP or RDMA transport, a source without a host.
func (s Spec) ConnectAddresses() []string {
	host := strings.Trim(serverHost(s.Type, s.Source), "[]")
	if s.Type == "cifs" {
		host = cmp.Or(optionValue(s.Options, "ip"), optionValue(s.Options, "addr"), host)
	}
	if host == "" {
		return nil
	}
	at := func(ports ...string) []string {
		out := make([]string, len(ports))
		for i, p := range ports {
			out[i] = net.JoinHostPort(host, p)
		}
		return out
	}
	port := optionValue(s.Options, "port")
	switch s.Type {
	case "nfs", "nfs4":
		proto := optionValue(s.Options, "proto")
		if hasOption(s.Options, "udp") || hasOption(s.Options, "rdma") || strings.HasPrefix(proto, "udp") || strings.HasPrefix(proto, "rdma") {
			return nil
		}
		if (s.Type == "nfs4" || strings.HasPrefix(nfsVersion(s.Options), "4")) && port != "0" {
			return at(cmp.Or(port, "2049"))
		}
		if port == "0" {
			port = ""
		}
		return at(cmp.Or(port, "2049"), "111")
	case "cifs":
		if hasOption(s.Options, "rdma") {
			return nil
		}
		if port != "" && port != "0" {
			return at(port)
		}
		return at("445", "139")
	}
	return nil
}

// nfsVersion is the NFS version asked for in opts: the last vers= or nfsvers=, as the kernel
// takes it ("" if none).
func nfsVersion(opts []string) string {
	var v string
	for _, o := range opts {
		name, val, _ := strings.Cut(o, "=")
		if name == "vers" || name == "nfsvers" {
			v = val
		}
	}
	return v
}

// optionValue is the value of the last name=value in opts ("" if none).
func optionValue(opts []string, name string) string {
	var v string
	for _, o := range opts {
		if val, ok := strings.CutPrefix(o, name+"="); ok {
			v = val
		}
	}
	return v
}
