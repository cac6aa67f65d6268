package nri

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

// TestRefusedConfigIsNeverInForce: a config whose mounter cannot start is refused before it is
// put in force, by a reload and by Configure alike: while the mounter starts, and after it
// failed, the previous config (and the engine built for it) stays in force.
func TestRefusedConfigIsNeverInForce(t *testing.T) {
	for _, via := range []string{"Reload", "Configure"} {
		t.Run(via, func(t *testing.T) {
			p := NewPlugin(mustConfig(t, testConfig), false, &specmodtest.Host{}, quietLogger())
			old := p.config()
			var during *configs.Config
			WithMounter(func(*configs.Config) (Mounter, error) {
				during = p.engine().Config
				return nil, errors.New("no cgroup2")
			})(p)
			var err error
			if via == "Reload" {
				err = p.Reload(mustConfig(t, networkTestConfig))
			} else {
				_, err = p.Configure(context.Background(), networkTestConfig, "test", "1")
			}
			if err == nil {
				t.Fatal("a config whose mounter cannot start was applied")
			}
			if during != old {
				t.Error("while its mounter started, the refused config was in force")
			}
			if p.config() != old || p.engine().Config != old || p.mounter() != nil {
				t.Error("after the refusal, the previous config is not in force alone")
			}
		})
	}
}

// TestConfigureAndReloadStartOneMounter: a reload that comes while Configure (an NRI reconnect)
// starts the mounter waits for it and uses that mounter instead of starting a second one for the
// same state dir.
func TestConfigureAndReloadStartOneMounter(t *testing.T) {
	fm := &fakeMounter{users: map[string]bool{}}
	p := NewPlugin(mustConfig(t, networkTestConfig), true, &specmodtest.Host{}, quietLogger())
	next := mustConfig(t, networkTestConfig)
	var (
		calls    atomic.Int32
		second   = make(chan struct{})
		reloaded sync.WaitGroup
		reload   error
	)
	WithMounter(func(*configs.Config) (Mounter, error) {
		if calls.Add(1) > 1 {
			close(second)
			return fm, nil
		}
		reloaded.Add(1)
		go func() {
			defer reloaded.Done()
			reload = p.Reload(next)
		}()
		// Give the reload time to start a mounter of its own, if it could; the assertion
		// below does not depend on how long this is.
		select {
		case <-second:
		case <-time.After(200 * time.Millisecond):
		}
		return fm, nil
	})(p)
	if _, err := p.Configure(context.Background(), "", "test", "1"); err != nil {
		t.Fatal(err)
	}
	reloaded.Wait()
	if reload != nil {
		t.Fatal(reload)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d mounters started, want 1", n)
	}
	if p.config() != next || p.mounter() != Mounter(fm) {
		t.Error("the reload's config is not in force with the one mounter")
	}
}
