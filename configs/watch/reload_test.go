package watch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestReload: a change of the file and a SIGHUP each reload it (a SIGHUP also when nothing
// changed); a SIGHUP while the file cannot be read logs the error and applies nothing; a file
// that cannot be watched is still reloaded by SIGHUP, with a warning that says so.
func TestReload(t *testing.T) {
	type step struct {
		write  string // new content of the file ("" : none)
		remove bool   // remove the file
		hup    bool   // send a SIGHUP
		want   string // what apply gets next ("": nothing)
	}
	tests := []struct {
		name      string
		unwatched bool   // the file's directory cannot be watched
		loaded    []byte // the content the agent loaded before the watch started (nil: none given)
		steps     []step
		wantWarn  string
		wantError string
	}{
		{name: "a change reloads", steps: []step{{write: "v2", want: "v2"}, {write: "v3", want: "v3"}}},
		// The file changed between the agent's load (v0) and the watch's start (v1).
		{name: "a change before the watch started reloads at once", loaded: []byte("v0"), steps: []step{{want: "v1"}, {write: "v2", want: "v2"}}},
		{name: "no change since the load: nothing", loaded: []byte("v1"), steps: []step{{write: "v2", want: "v2"}}},
		{name: "SIGHUP reloads the same content", steps: []step{{hup: true, want: "v1"}, {hup: true, want: "v1"}}},
		{name: "SIGHUP on an unreadable file keeps the config", steps: []step{{remove: true, hup: true}},
			wantError: "config reload: open "},
		{name: "SIGHUP reloads an unwatched file", unwatched: true, steps: []step{{hup: true, want: "v1"}},
			wantWarn: "cannot watch the config for changes (SIGHUP still reloads): too many open files"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "config.yaml")
			if err := os.WriteFile(path, []byte("v1"), 0o644); err != nil {
				t.Fatal(err)
			}
			watching := make(chan struct{})
			watchFn := func(ctx context.Context, path string, changed func([]byte, error)) error {
				return watch(ctx, path, tc.loaded, changed, watching)
			}
			if tc.unwatched { // as when the node is out of inotify watches
				watchFn = func(context.Context, string, func([]byte, error)) error { return errors.New("too many open files") }
			}
			log, hook := logtest.NewNullLogger()
			logged := make(chan struct{}, 10)
			log.AddHook(anyHook{logged})
			applied := make(chan string, 10)
			hup := make(chan os.Signal, 1)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				reload(ctx, path, hup, watchFn, func(b []byte) { applied <- string(b) }, log)
			}()
			defer func() { cancel(); <-done }()
			if tc.unwatched {
				select {
				case <-logged:
				case <-time.After(10 * time.Second):
					t.Fatal("no warning that the file cannot be watched")
				}
			} else {
				awaitWatching(t, watching)
			}
			for i, s := range tc.steps {
				if s.write != "" {
					if err := os.WriteFile(path, []byte(s.write), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if s.remove {
					os.Remove(path)
				}
				if s.hup {
					hup <- syscall.SIGHUP
				}
				if s.want == "" {
					select {
					case got := <-applied:
						t.Fatalf("step %d: applied %q, want nothing", i, got)
					case <-logged:
					case <-time.After(10 * time.Second):
						t.Fatalf("step %d: neither applied nor logged", i)
					}
					continue
				}
				select {
				case got := <-applied:
					if got != s.want {
						t.Fatalf("step %d: applied %q, want %q", i, got, s.want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("step %d: nothing applied, want %q", i, s.want)
				}
			}
			var warns, errs []string
			for _, e := range hook.AllEntries() {
				if e.Data["config"] != path {
					t.Errorf("log %q does not name the config %s", e.Message, path)
				}
				switch e.Level {
				case logrus.WarnLevel:
					warns = append(warns, e.Message)
				case logrus.ErrorLevel:
					errs = append(errs, e.Message)
				}
			}
			for _, c := range []struct {
				got  []string
				want string
			}{{warns, tc.wantWarn}, {errs, tc.wantError}} {
				got := strings.Join(c.got, "\n")
				if c.want == "" && got != "" || !strings.Contains(got, c.want) {
					t.Errorf("logged %q, want %q", got, c.want)
				}
			}
		})
	}
}

// anyHook sends on c for every entry logged.
type anyHook struct{ c chan struct{} }

func (anyHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h anyHook) Fire(*logrus.Entry) error {
	select {
	case h.c <- struct{}{}:
	default:
	}
	return nil
}
