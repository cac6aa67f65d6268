package guard

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// fileSystem is what replacing a file touches, so that a test can watch the steps and fail
// each one.
type fileSystem interface {
	CreateTemp(dir, pattern string) (tempFile, error)
	Rename(oldPath, newPath string) error
	Remove(path string) error
	// SyncDir makes the directory's entries (a rename into it) durable.
	SyncDir(dir string) error
}

type tempFile interface {
	io.Writer
	Sync() error
	Close() error
	Name() string
}

// osFiles is the node's file system.
var osFiles fileSystem = liveFiles{}

type liveFiles struct{}

func (liveFiles) CreateTemp(dir, pattern string) (tempFile, error) {
	return os.CreateTemp(dir, pattern)
}
func (liveFiles) Rename(oldPath, newPath string) error { return os.Rename(oldPath, newPath) }
func (liveFiles) Remove(path string) error             { return os.Remove(path) }

func (liveFiles) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// writeAtomic replaces path with data: a reader sees the old or the new file, never half.
// After a crash of the node either may be lost; what must survive one goes through
// writeDurable.
func writeAtomic(path string, data []byte) error { return replaceFile(osFiles, path, data, false) }

// writeDurable is writeAtomic that also survives a crash of the node: once it returns, path
// holds data after a reboot, and a crash before leaves the old file (or none), never an empty
// or torn one (the data is on disk before its name is).
func writeDurable(fsys fileSystem, path string, data []byte) error {
	return replaceFile(fsys, path, data, true)
}

func replaceFile(fsys fileSystem, path string, data []byte, durable bool) error {
	dir := filepath.Dir(path)
	tmp, err := fsys.CreateTemp(dir, filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			fsys.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp.Name(), path); err != nil {
		return err
	}
	renamed = true
	if durable {
		return fsys.SyncDir(dir)
	}
	return nil
}

const (
	lockAttempts = 500 // times lockPause: a writer waits for a lock at most about 1s
	lockPause    = 2 * time.Millisecond
)

// lockFile takes the exclusive lock of path (a flock, released when the returned function
// closes it), waiting at most lockAttempts*lockPause.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	for range lockAttempts {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			break
		}
		time.Sleep(lockPause)
	}
	f.Close()
	return nil, fmt.Errorf("lock %s: %w", path, err)
}
