package liveupdate

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watcher is the agent's one inotify instance for live subPath volumes: it tells notify the
// volume directory whose ..data link was replaced (kubelet's atomic writer renames ..data_tmp
// over it: IN_MOVED_TO "..data"). Its goroutine runs while it watches a directory; close
// stops it and waits for it.
type watcher struct {
	notify func(dir string)

	mu   sync.Mutex
	f    *os.File // nil while nothing is watched
	wds  map[int]string
	dirs map[string]int
	done chan struct{}
}

func newWatcher(notify func(dir string)) *watcher {
	return &watcher{notify: notify, wds: map[int]string{}, dirs: map[string]int{}}
}

// watchMask: only the rename onto ..data; the directory is kubelet's and is never followed
// through a symlink.
const watchMask = unix.IN_MOVED_TO | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// add watches dir, starting the goroutine with the first directory.
func (w *watcher) add(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.dirs[dir]; ok {
		return nil
	}
	if w.f == nil {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			return fmt.Errorf("inotify: %w", err)
		}
		// Non-blocking and through os.File: the read waits in Go's poller, and Close ends it.
		w.f = os.NewFile(uintptr(fd), "inotify")
		w.done = make(chan struct{})
		go w.run(w.f, w.done)
	}
	rc, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	var wd int
	var werr error
	if err := rc.Control(func(fd uintptr) { wd, werr = unix.InotifyAddWatch(int(fd), dir, watchMask) }); err != nil {
		return err
	}
	if werr != nil {
		w.stopIfIdleLocked()
		return fmt.Errorf("watch %s: %w", dir, werr)
	}
	w.wds[wd], w.dirs[dir] = dir, wd
	return nil
}

// remove stops watching dir; the last one stops the goroutine and waits for it.
func (w *watcher) remove(dir string) {
	w.mu.Lock()
	wd, ok := w.dirs[dir]
	if ok {
		delete(w.dirs, dir)
		delete(w.wds, wd)
		if rc, err := w.f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _, _ = unix.InotifyRmWatch(int(fd), uint32(wd)) })
		}
	}
	done := w.stopIfIdleLocked()
	w.mu.Unlock()
	if done != nil {
		<-done
	}
}

// stopIfIdleLocked closes the inotify instance when nothing is watched and returns the channel
// its goroutine closes when it ends. Callers hold w.mu.
func (w *watcher) stopIfIdleLocked() chan struct{} {
	if w.f == nil || len(w.dirs) > 0 {
		return nil
	}
	w.f.Close()
	done := w.done
	w.f, w.done = nil, nil
	return done
}

// close stops watching everything and waits for the goroutine.
func (w *watcher) close() {
	w.mu.Lock()
	clear(w.dirs)
	clear(w.wds)
	done := w.stopIfIdleLocked()
	w.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (w *watcher) run(f *os.File, done chan struct{}) {
	defer close(done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			return // closed (the poller retries EINTR and EAGAIN itself)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				w.notifyAll() // events were lost: every volume looks again
				continue
			}
			if ev.Mask&unix.IN_MOVED_TO == 0 || string(bytes.TrimRight(name, "\x00")) != "..data" {
				continue
			}
			w.mu.Lock()
			dir, ok := w.wds[int(ev.Wd)]
			w.mu.Unlock()
			if ok {
				w.notify(dir)
			}
		}
	}
}

func (w *watcher) notifyAll() {
	w.mu.Lock()
	dirs := make([]string, 0, len(w.dirs))
	for d := range w.dirs {
		dirs = append(dirs, d)
	}
	w.mu.Unlock()
	for _, d := range dirs {
		w.notify(d)
	}
}
