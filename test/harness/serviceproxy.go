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

// ServiceProxy stands in for kube-proxy for the one Service a pod of this node needs without
// CNI routes or DNS: `kubernetes`. In the node's network namespace (KubeOptions.Network; the
// host's network is shared and is not changed) it puts KubernetesServiceIP on the loopback
// device and forwards KubernetesServiceIP:443 to the API server, as kube-proxy's rules do, so
// that a hostNetwork pod using its in-cluster config (a Helm hook's) reaches the API. Close
// ends it; the address goes with the namespace.
type ServiceProxy struct {
	l    net.Listener
	wg   sync.WaitGroup
	once sync.Once
}

// StartServiceProxy starts the stand-in; the node must have a Network.
func (k *KubeNode) StartServiceProxy() (*ServiceProxy, error) {
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
	p := &ServiceProxy{l: l}
	api := net.JoinHostPort("127.0.0.1", strconv.Itoa(k.apiPort))
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				up, err := n.DialContext(context.Background(), "tcp", api)
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
	return p, nil
}

// Close stops accepting and ends the open connections' copies (their peers see EOF).
func (p *ServiceProxy) Close() error {
	if p == nil {
		return nil
	}
	p.once.Do(func() { p.l.Close() })
	return nil
}
