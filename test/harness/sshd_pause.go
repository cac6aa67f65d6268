package harness

import (
	"fmt"
	"syscall"
)

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
