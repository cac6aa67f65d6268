package harness

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// logSink receives containerd's output (from every start of it) and writes it to a file in
// the instance directory and to Options.Log. After detach it drops everything: the copy
// goroutines may outlive Close, and writing to a testing.T-backed writer after the test has
// finished panics.
type logSink struct {
	mu       sync.Mutex
	file     *os.File
	extra    io.Writer // may be nil
	detached bool
}

func openLogSink(path string, extra io.Writer) (*logSink, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open containerd log %s: %w", path, err)
	}
	return &logSink{file: f, extra: extra}, nil
}

// Write never fails, so that the copy goroutine keeps draining the pipe: a writer that
// stopped reading would block containerd once the pipe is full.
func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.detached {
		return len(p), nil
	}
	_, _ = s.file.Write(p)
	if s.extra != nil {
		_, _ = s.extra.Write(p)
	}
	return len(p), nil
}

// copyFrom forwards r until every writer of it has closed it.
func (s *logSink) copyFrom(r *os.File) {
	defer r.Close()
	_, _ = io.Copy(s, r)
}

// detach stops forwarding and closes the file. It is idempotent and nil-safe.
func (s *logSink) detach() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.detached {
		s.detached = true
		_ = s.file.Close()
	}
}
