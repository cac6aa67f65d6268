// Package watch tells when a config file changed, including the way kubelet updates a
// ConfigMap volume: its atomic writer swaps a "..data" symlink in the file's directory, so the
// file's own name sees no event and a watch on the file alone misses the update. It watches the
// directory and compares the file's content, so an event that changed nothing is no change.
package watch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settle is how long the directory must be quiet before the file is read: the atomic writer
// makes several changes in a row.
const settle = 200 * time.Millisecond

// Watch calls changed with the file's new content each time it differs from what it was,
// until ctx ends. A read error is passed on as such.
//
// loaded is the content the caller has in force, read before it loaded the file: the first
// content Watch reads, once the directory is watched, is reported at once if it differs, so
// an update that lands between the caller's load and the watch's start is not missed (at
// worst it is reported although the load already had it). nil: the first content Watch reads
// is taken as the one in force.
func Watch(ctx context.Context, path string, loaded []byte, changed func(content []byte, err error)) error {
	return watch(ctx, path, loaded, changed, nil)
}

// watch is Watch; it closes watching, if not nil, once the directory is watched and the first
// content read: a change made from then on is reported (the tests' start signal).
func watch(ctx context.Context, path string, loaded []byte, changed func(content []byte, err error), watching chan<- struct{}) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return err
	}
	last, err := os.ReadFile(path)
	if watching != nil {
		close(watching)
	}
	if loaded != nil {
		switch {
		case err != nil:
			changed(nil, err)
		case !bytes.Equal(last, loaded):
			changed(last, nil)
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			changed(nil, err)
		case <-w.Events:
			timer.Reset(settle)
		case <-timer.C:
			now, err := os.ReadFile(path)
			if err != nil {
				changed(nil, err)
				continue
			}
			if !bytes.Equal(now, last) {
				last = now
				changed(now, nil)
			}
		}
	}
}
