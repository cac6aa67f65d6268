package testsupport

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// SSHD is an sshd on 127.0.0.1 serving SFTP to root with keys of its own: the network
// filesystem server (sshfs over loopback) of the tests, the benchmarks and the demo. It runs
// in a cgroup of its own, so Stop also ends the per-connection children.
type SSHD struct {
	keys   string
	port   int
	cgroup string
	log    string
	cmd    *exec.Cmd
}

// sshdStopTimeout bounds how long sshd and its connections may take to exit after cgroup.kill.
const sshdStopTimeout = 30 * time.Second

// MakeSSHKeys makes, in dir, sshd's host key ("host"), root's client key ("user") and the
// authorized_keys file that lets that key in.
func MakeSSHKeys(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, k := range []string{"host", "user"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, k)).CombinedOutput(); err != nil {
			return fmt.Errorf("ssh-keygen: %w: %s", err, out)
		}
	}
	pub, err := os.ReadFile(filepath.Join(dir, "user.pub"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600)
}

// FreePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// NewSSHD describes an sshd on 127.0.0.1:port with the keys MakeSSHKeys made in keys, which
// runs in the cgroup2 directory cgroup (Start makes it, Stop kills and removes it) and logs to
// log. Start starts it.
func NewSSHD(keys string, port int, cgroup, log string) *SSHD {
	return &SSHD{keys: keys, port: port, cgroup: cgroup, log: log}
}

// Port is the TCP port sshd listens on.
func (s *SSHD) Port() int { return s.port }

// IdentityFile is the client key root logs in with.
func (s *SSHD) IdentityFile() string { return filepath.Join(s.keys, "user") }

// Log is sshd's log file.
func (s *SSHD) Log() string { return s.log }

// ClientOptions are the sshfs options that reach this server: its port and key, no host key
// check (the server's key is made per test).
func (s *SSHD) ClientOptions() []string {
	return []string{fmt.Sprintf("port=%d", s.Port()), "IdentityFile=" + s.IdentityFile(), "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"}
}

// Start starts sshd (again, on the same port, after Stop) and waits until it listens.
func (s *SSHD) Start() error {
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege separation directory
		return err
	}
	if err := os.Mkdir(s.cgroup, 0o755); err != nil {
		return fmt.Errorf("create cgroup: %w", err)
	}
	s.cmd = exec.Command("/usr/sbin/sshd", "-D", "-E", s.log, "-f", "/dev/null", "-h", filepath.Join(s.keys, "host"),
		"-p", strconv.Itoa(s.port), "-o", "ListenAddress=127.0.0.1", "-o", "Subsystem=sftp internal-sftp",
		"-o", "AuthorizedKeysFile="+filepath.Join(s.keys, "authorized_keys"), "-o", "StrictModes=no", "-o", "PidFile=none")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := StartInCgroup(s.cmd, s.cgroup); err != nil {
		return fmt.Errorf("start sshd: %w", err)
	}
	go s.cmd.Wait()
	// A hang guard, not a time limit: an emulated guest (test/vm) on a loaded machine takes
	// more than 10 s to get sshd listening.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(s.port))
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(s.log)
			return fmt.Errorf("sshd does not listen on 127.0.0.1:%d: %v\n%s", s.port, err, out)
		}
	}
}

// Stop kills sshd and every connection it serves, and removes its cgroup. Safe to call twice,
// and after the cgroup was killed and removed from outside.
func (s *SSHD) Stop() error {
	if _, err := os.Stat(s.cgroup); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if left, err := KillCgroup(s.cgroup, sshdStopTimeout); err != nil {
		return fmt.Errorf("stop sshd on port %d: %w (pids %v)", s.port, err, left)
	}
	return os.Remove(s.cgroup)
}

// Pause stops sshd with SIGSTOP: a hung server. The kernel still completes TCP connections
// to its port (the listen backlog), but nothing answers on them, as with a hung NFS server.
// Connections it already serves keep their own processes and are not stopped.
func (s *SSHD) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused sshd (SIGCONT): the connections waiting in its backlog are served.
func (s *SSHD) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *SSHD) signal(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("sshd on port %d is not running", s.port)
	}
	return s.cmd.Process.Signal(sig)
}
