package watch

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
)

// Reload calls apply with the content of the config file at path each time it changes (Watch:
// a ConfigMap's ..data swap included) and on every SIGHUP (which rereads it even if unchanged),
// until ctx ends. A file that cannot be read is logged and apply is not called: the config in
// force stays. If the file cannot be watched, SIGHUP still reloads it. apply judges the
// content itself (a refused config is its to log and count). loaded is the content read
// before the config in force was loaded (see Watch).
func Reload(ctx context.Context, path string, loaded []byte, apply func(content []byte), log logrus.FieldLogger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload(ctx, path, hup, func(ctx context.Context, path string, changed func([]byte, error)) error {
		return Watch(ctx, path, loaded, changed)
	}, apply, log)
}

// reload is Reload with the SIGHUPs coming from hup and the changes from watch.
func reload(ctx context.Context, path string, hup <-chan os.Signal, watch func(context.Context, string, func([]byte, error)) error,
	apply func([]byte), log logrus.FieldLogger) {
	log = log.WithField("config", path)
	changed := func(content []byte, err error) {
		if err != nil {
			log.Errorf("config reload: %v", err)
			return
		}
		apply(content)
	}
	signals := make(chan struct{})
	go func() {
		defer close(signals)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				changed(os.ReadFile(path))
			}
		}
	}()
	defer func() { <-signals }() // no reload after Reload returned
	if err := watch(ctx, path, changed); err != nil {
		log.Warnf("cannot watch the config for changes (SIGHUP still reloads): %v", err)
		<-ctx.Done()
	}
}
