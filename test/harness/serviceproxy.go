package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
)

// KubernetesServiceIP is the ClusterIP kube-apiserver gives the `kubernetes` Service (the
// first address of --service-cluster-ip-range); pods reach the API server there, port 443
// (KUBERNETES_SERVICE_HOST/PORT). Its serving certificate names it.
const KubernetesServiceIP = "10.96.0.1"

// Forwarder copies each connection accepted on its listener to one it dials, both ways, until
// either side ends. Close stops accepting.
type Forwarder struct {
	l    net.Listener
	once sync.Once
}

func forward(l net.Listener, dial func() (net.Conn, error)) *Forwarder {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := dial()
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); done <- struct{}{} }()
				go func() { io.Copy(c, up); done <- struct{}{} }()
				<-done // one side ended: the deferred closes end the other
			}()
		}
	}()
	return &Forwarder{l: l}
}

// Close stops accepting; open connections end when a side does.
func (f *Forwarder) Close() error {
	if f == nil {
		return nil
	}
	f.once.Do(func() { f.l.Close() })
	return nil
}

// StartServiceProxy stands in for kube-proxy for the one Service a pod of this node needs
// without CNI routes or DNS: `kubernetes`. In the node's network namespace (KubeOptions.Network;
// the host's network is not changed) it puts KubernetesServiceIP on the loopback device and
// forwards KubernetesServiceIP:443 to the API server, as kube-proxy's rules do, so that a
// hostNetwork pod using its in-cluster config (a Helm hook's) reaches the API. The address
// goes with the namespace.
func (k *KubeNode) StartServiceProxy() (*Forwarder, error) {
	n := k.opts.Network
	if n == nil {
		return nil, errors.New("the service proxy needs a node network (KubeOptions.Network)")
	}
	if out, err := n.Command("ip", "addr", "add", KubernetesServiceIP+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip addr add %s in the node network: %w: %s", KubernetesServiceIP, err, out)
	}
	l, err := n.Listen("tcp", net.JoinHostPort(KubernetesServiceIP, "443"))
	if err != nil {
		return nil, err
	}
	api := net.JoinHostPort("127.0.0.1", strconv.Itoa(k.apiPort))
	return forward(l, func() (net.Conn, error) { return n.DialContext(context.Background(), "tcp", api) }), nil
}

// ForwardHostPort makes the host's 127.0.0.1:port reachable inside the namespace at the same
// address: a server of the test (sshd) for a client the node runs (a FUSE mount the agent
// makes from its hostNetwork pod).
func (n *NodeNetwork) ForwardHostPort(port int) (*Forwarder, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := n.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return forward(l, func() (net.Conn, error) { return net.Dial("tcp", addr) }), nil
}
