package harness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// SSHD is an sshd on 127.0.0.1 serving SFTP to root with a key of its own: the network
// filesystem server (sshfs over loopback) of the e2e tests, the benchmarks and the demo. It
// runs in a cgroup of its own, so Stop also ends the per-connection children.
type SSHD struct {
	dir  string
	port int
	cg   *Cgroup2
	cmd  *exec.Cmd
}

// StartSSHD generates keys under dir, makes dir/export, and starts sshd on a free port.
func StartSSHD(dir string) (*SSHD, error) {
	s := &SSHD{dir: filepath.Join(dir, "sshd")}
	for _, d := range []string{s.dir, s.Export(), "/run/sshd"} { // /run/sshd: privilege separation
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for _, k := range []string{"host", "user"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(s.dir, k)).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ssh-keygen: %w: %s", err, out)
		}
	}
	pub, err := os.ReadFile(filepath.Join(s.dir, "user.pub"))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "authorized_keys"), pub, 0o600); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := s.Start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Port is the TCP port sshd listens on.
func (s *SSHD) Port() int { return s.port }

// IdentityFile is the client key root logs in with.
func (s *SSHD) IdentityFile() string { return filepath.Join(s.dir, "user") }

// ClientOptions are the sshfs options that reach this server: its port and key, no host key
// check (the server's key is made per test).
func (s *SSHD) ClientOptions() []string {
	return []string{fmt.Sprintf("port=%d", s.Port()), "IdentityFile=" + s.IdentityFile(), "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"}
}

// Export is a directory for the test to fill and mount.
func (s *SSHD) Export() string { return filepath.Join(s.dir, "export") }

// Start starts sshd (again, on the same port after Stop).
func (s *SSHD) Start() error {
	cg, err := NewCgroup2(filepath.Base(filepath.Dir(s.dir)) + "-sshd-" + strconv.Itoa(s.port))
	if err != nil {
		return err
	}
	s.cg = cg
	log := filepath.Join(s.dir, "sshd.log")
	s.cmd = exec.Command("/usr/sbin/sshd", "-D", "-E", log, "-f", "/dev/null", "-h", filepath.Join(s.dir, "host"),
		"-p", strconv.Itoa(s.port), "-o", "ListenAddress=127.0.0.1", "-o", "Subsystem=sftp internal-sftp",
		"-o", "AuthorizedKeysFile="+filepath.Join(s.dir, "authorized_keys"), "-o", "StrictModes=no", "-o", "PidFile=none")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := StartInCgroup(s.cmd, cg.Dir); err != nil {
		return fmt.Errorf("start sshd: %w", err)
	}
	go s.cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(s.port))
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log)
			return fmt.Errorf("sshd does not listen on 127.0.0.1:%d: %v\n%s", s.port, err, out)
		}
	}
}

// Stop kills sshd and every connection it serves. Safe to call twice.
func (s *SSHD) Stop() {
	if s.cg != nil {
		s.cg.Remove()
	}
}
