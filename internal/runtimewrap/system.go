package runtimewrap

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// OS is the System of a real node.
type OS struct{}

// ReadFile reads at most limit bytes of path.
func (OS) ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// AppendFile appends data to path, creating it (0600) if needed, as runc does with its --log.
func (OS) AppendFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// Exec becomes runtime with argv and the same environment.
func (OS) Exec(runtime string, argv []string) error {
	path, err := exec.LookPath(runtime)
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, os.Environ())
}

// Now is the wall clock.
func (OS) Now() time.Time { return time.Now() }
