package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// KubeAPIMissing says why StartKubeAPI cannot run here ("" when it can).
func KubeAPIMissing(opts KubeOptions) string {
	opts = opts.withDefaults()
	if _, err := os.Stat(filepath.Join(opts.BinDir, apiserverBin)); err != nil {
		return fmt.Sprintf("%s: %v (run test/tools/install.sh)", filepath.Join(opts.BinDir, apiserverBin), err)
	}
	if _, err := exec.LookPath(opts.Etcd); err != nil {
		return fmt.Sprintf("etcd: %v (apt-get install etcd-server, or run test/tools/install.sh)", err)
	}
	return ""
}

// StartKubeAPI starts a control plane alone, etcd and kube-apiserver, without kubelet or a
// runtime: for tests of what the agent asks the API server (TokenReview, SubjectAccessReview).
// opts.Authorization chooses the authorizer (default AlwaysAllow; "RBAC" to test rights).
// Close stops it and removes its directory; on failure it returns the closed node with the
// error, as StartKubeNode.
func StartKubeAPI(ctx context.Context, opts KubeOptions) (*KubeNode, error) {
	opts = opts.withDefaults()
	if why := KubeAPIMissing(opts); why != "" {
		return nil, errors.New(why)
	}
	sweepStaleKube()
	dir, err := os.MkdirTemp(instanceParent, kubeDirPrefix)
	if err != nil {
		return nil, err
	}
	k := &KubeNode{opts: opts, dir: dir, pki: kubePKI{dir: filepath.Join(dir, "pki")}}
	if err := writeOwner(layout{dir: dir}); err != nil {
		return k, errors.Join(err, k.Close())
	}
	if k.log, err = openLogSink(filepath.Join(k.dir, "output.log"), k.opts.Log); err != nil {
		return k, errors.Join(err, k.Close())
	}
	if err := k.pki.generate(k.opts.NodeName); err != nil {
		return k, errors.Join(fmt.Errorf("generate certificates: %w", err), k.Close())
	}
	ports, err := freePorts(3)
	if err != nil {
		return k, errors.Join(err, k.Close())
	}
	k.etcdPort, k.apiPort = ports[0], ports[2]
	if err := k.startEtcd(ctx, ports[0], ports[1]); err != nil {
		return k, errors.Join(err, k.Close())
	}
	if err := k.startAPIServer(ctx); err != nil {
		return k, errors.Join(err, k.Close())
	}
	return k, nil
}

// APIURL is the API server's https:// URL.
func (k *KubeNode) APIURL() string { return fmt.Sprintf("https://127.0.0.1:%d", k.apiPort) }

// CAFile is the cluster CA's certificate, which the API server's serving certificate chains to.
func (k *KubeNode) CAFile() string { return k.pki.caCert() }

// PauseAPIServer stops kube-apiserver with SIGSTOP: it keeps its port and accepts connections
// but answers nothing, as a hung API server does. The returned function resumes it; Close
// resumes it too.
func (k *KubeNode) PauseAPIServer() (resume func(), err error) {
	p := k.apiserver.cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	k.paused = true
	return func() {
		if k.paused {
			_ = p.Signal(syscall.SIGCONT)
			k.paused = false
		}
	}, nil
}
