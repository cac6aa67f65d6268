//go:build e2e

package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// swapWatch records when kubelet's atomic writer swaps a volume's ..data symlink (the rename
// of ..data_tmp onto it), by the seq the volume's key holds right after the swap.
type swapWatch struct {
	f    *os.File
	done chan struct{}
	mu   sync.Mutex
	at   map[int]time.Time
	err  error
}

// watchDataSwaps watches dir (a configMap volume's directory on the host) with inotify until
// close; each ..data swap is stamped with the time its event is read and the seq of dir/key.
func watchDataSwaps(dir, key string) (*swapWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	// Non-blocking: the runtime's poller waits for it, and Close ends a pending Read.
	w := &swapWatch{f: os.NewFile(uintptr(fd), "inotify"), done: make(chan struct{}), at: map[int]time.Time{}}
	go w.run(dir, key)
	return w, nil
}

func (w *swapWatch) run(dir, key string) {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			return
		}
		now := time.Now()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+nameLen], "\x00"))
			off += unix.SizeofInotifyEvent + nameLen
			if name != "..data" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, "..data", key))
			if err != nil || len(b) < 6 {
				continue
			}
			if seq, err := strconv.Atoi(string(b[:6])); err == nil {
				w.mu.Lock()
				if _, ok := w.at[seq]; !ok {
					w.at[seq] = now
				}
				w.mu.Unlock()
			}
		}
	}
}

// await returns when the swap to seq happened, waiting for it up to timeout.
func (w *swapWatch) await(seq int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		at, ok := w.at[seq]
		err := w.err
		w.mu.Unlock()
		switch {
		case ok:
			return at, nil
		case err != nil:
			return time.Time{}, fmt.Errorf("inotify: %w", err)
		case time.Now().After(deadline):
			return time.Time{}, fmt.Errorf("no ..data swap to seq %d seen within %s", seq, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// close stops the watch and waits for its goroutine.
func (w *swapWatch) close() {
	w.f.Close()
	<-w.done
}
