package harness

import (
	"os"
	"path/filepath"
	"strconv"

	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// SSHD is testsupport's sshd (serving SFTP to root on 127.0.0.1) with its keys and an export
// directory below a work dir, and its cgroup named after that dir: the network filesystem
// server of the e2e tests, the benchmarks and the demo.
type SSHD struct {
	*testsupport.SSHD
	dir string
}

// StartSSHD generates keys under dir, makes dir/export, and starts sshd on a free port.
func StartSSHD(dir string) (*SSHD, error) {
	s := &SSHD{dir: filepath.Join(dir, "sshd")}
	for _, d := range []string{s.dir, s.Export()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := testsupport.MakeSSHKeys(s.dir); err != nil {
		return nil, err
	}
	port, err := testsupport.FreePort()
	if err != nil {
		return nil, err
	}
	root, err := Cgroup2Root()
	if err != nil {
		return nil, err
	}
	cg := filepath.Join(root, filepath.Base(dir)+"-sshd-"+strconv.Itoa(port))
	s.SSHD = testsupport.NewSSHD(s.dir, port, cg, filepath.Join(s.dir, "sshd.log"))
	if err := s.Start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Export is a directory for the test to fill and mount.
func (s *SSHD) Export() string { return filepath.Join(s.dir, "export") }

// Stop kills sshd and every connection it serves. Safe to call twice.
func (s *SSHD) Stop() { s.SSHD.Stop() }
