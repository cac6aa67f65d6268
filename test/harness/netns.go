package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A node network is a network namespace of its own for a whole Kubernetes node: containerd
// (so the CNI bridge and the pods' veths live in it), etcd, kube-apiserver, kubelet, the
// controller-manager, the scheduler and whatever talks to them (an e2e suite). kubelet needs
// a node IP it can report and the apiserver can reach (exec, logs): it refuses loopback and
// link-local addresses, and this kernel has no dummy links, so the namespace's loopback
// device carries an address from 198.18.0.0/15 (RFC 2544, benchmarking, never routed). Ports
// inside cannot clash with anything outside, and every link goes away with the namespace.
const (
	// NodeNetworkIP is the node's address inside its network namespace.
	NodeNetworkIP = "198.18.0.2"
	// nodePodSubnet is the pods' network on the node's CNI bridge.
	nodePodSubnet = "198.19.0.0/24"
	nodeBridge    = "mk-cni0"
)

// NodeNetwork is a network namespace held by a process of the harness, which ends with
// Close (or with the test process: it gets SIGKILL when its parent dies). The namespace and
// its links vanish once the holder and every process started in it (containerd's shims and
// the pods included) are gone.
type NodeNetwork struct {
	holder *exec.Cmd
	done   chan struct{}
	path   string // /proc/<holder>/ns/net
	cniDir string
}

// NodeNetworkMissing says why a NodeNetwork cannot be made here ("" when it can).
func NodeNetworkMissing() string {
	for _, b := range []string{"unshare", "nsenter", "ip", "sleep"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Sprintf("%s: %v (apt-get install util-linux iproute2)", b, err)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			return fmt.Sprintf("CNI plugin %s: %v (apt-get install containernetworking-plugins)", p, err)
		}
	}
	return ""
}

// cniBinDir is where Debian's containernetworking-plugins puts the CNI plugins.
const cniBinDir = "/usr/lib/cni"

// StartNodeNetwork makes the namespace: loopback up with 127.0.0.1 and NodeNetworkIP, and a
// CNI configuration in dir/cni (a bridge network for the pods, host-local addresses kept in
// dir/cni/ipam) for Options.CNIConfDir.
func StartNodeNetwork(ctx context.Context, dir string) (*NodeNetwork, error) {
	if why := NodeNetworkMissing(); why != "" {
		return nil, errors.New(why)
	}
	n := &NodeNetwork{cniDir: filepath.Join(dir, "cni"), done: make(chan struct{})}
	if err := os.MkdirAll(filepath.Join(n.cniDir, "ipam"), 0o755); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "mk-node",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": false, "ipMasq": false,
     "ipam": {"type": "host-local", "subnet": %q, "dataDir": %q}},
    {"type": "loopback"}
  ]
}
`, nodeBridge, nodePodSubnet, filepath.Join(n.cniDir, "ipam"))
	if err := os.WriteFile(filepath.Join(n.cniDir, "10-mk-node.conflist"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	n.holder = exec.Command("unshare", "--net", "sleep", "infinity")
	n.holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.holder.Start(); err != nil {
		return nil, fmt.Errorf("start the node network's holder: %w", err)
	}
	go func() { n.holder.Wait(); close(n.done) }()
	// unshare execs sleep once the namespace exists: wait until the holder's namespace is no
	// longer ours.
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return nil, errors.Join(err, n.Close())
	}
	n.path = fmt.Sprintf("/proc/%d/ns/net", n.holder.Process.Pid)
	err = poll(ctx, 10*time.Second, func(context.Context) error {
		if theirs, err := os.Readlink(n.path); err != nil || theirs == own {
			return fmt.Errorf("holder %d not in a network namespace of its own yet (%v)", n.holder.Process.Pid, err)
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(err, n.Close())
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", NodeNetworkIP + "/32", "dev", "lo"},
	} {
		if out, err := n.Command("ip", args...).CombinedOutput(); err != nil {
			return nil, errors.Join(fmt.Errorf("ip %s in the node network: %w: %s", strings.Join(args, " "), err, out), n.Close())
		}
	}
	return n, nil
}

// Path is the namespace's file, for nsenter --net=.
func (n *NodeNetwork) Path() string { return n.path }

// CNIConfDir holds the pods' CNI network (Options.CNIConfDir; its plugins are in
// CNIBinDir()).
func (n *NodeNetwork) CNIConfDir() string { return n.cniDir }

// CNIBinDir is where the CNI plugins are (Options.CNIBinDir).
func (n *NodeNetwork) CNIBinDir() string { return cniBinDir }

// Command is exec.Command for a program that runs in the namespace.
func (n *NodeNetwork) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", n.wrap(name, args...)...)
}

// wrap returns nsenter's arguments that run name with args in the namespace. nsenter execs
// it (no fork for a network namespace alone), so a parent-death signal still reaches it.
func (n *NodeNetwork) wrap(name string, args ...string) []string {
	return append([]string{"--net=" + n.path, "--", name}, args...)
}

// DialContext opens a connection from inside the namespace: the socket is made on a thread
// that has entered it (a socket stays in the namespace it was made in), and the thread goes
// back before it is released.
func (n *NodeNetwork) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.inside(func() error {
		// The dialer makes the socket on this goroutine (locked to this thread) before it waits.
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	if errors.Is(err, errThreadTainted) && c != nil {
		c.Close()
		c = nil
	}
	return c, err
}

// Listen opens a listener inside the namespace, as DialContext opens a connection.
func (n *NodeNetwork) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.inside(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	if errors.Is(err, errThreadTainted) && l != nil {
		l.Close()
		l = nil
	}
	return l, err
}

var errThreadTainted = errors.New("could not return the thread to its network namespace")

// inside runs fn on a goroutine locked to a thread that has entered the namespace.
func (n *NodeNetwork) inside(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := n.onThreadInside(fn)
		if !errors.Is(err, errThreadTainted) {
			runtime.UnlockOSThread()
		} // else: the thread stays locked and ends with this goroutine, as Go then does
		ch <- err
	}()
	return <-ch
}

// onThreadInside runs fn on this (locked) thread inside the namespace, then returns the
// thread to its own; errThreadTainted if it cannot (the caller then keeps the thread locked).
func (n *NodeNetwork) onThreadInside(fn func() error) error {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	defer self.Close()
	target, err := os.Open(n.path)
	if err != nil {
		return fmt.Errorf("node network: %w", err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter the node network: %w", err)
	}
	fnErr := fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("%w: %v", errThreadTainted, err)
	}
	return fnErr
}

// Close ends the holder. The namespace goes once nothing else runs in it: close the node's
// processes and containerd first.
func (n *NodeNetwork) Close() error {
	if n == nil || n.holder == nil || n.holder.Process == nil {
		return nil
	}
	select {
	case <-n.done:
		return nil
	default:
	}
	_ = n.holder.Process.Kill()
	<-n.done
	return nil
}
