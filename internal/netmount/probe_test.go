package netmount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/bounded"
	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// healingFake is a fakeSystem that heals: it says whether a mount's daemon is gone.
type healingFake struct {
	*fakeSystem
	gone error
}

func (h healingFake) daemonGone(netspec.Spec, string) error           { return h.gone }
func (h healingFake) replace(string, string) error                    { return nil }
func (h healingFake) prepareStaging(dir string) error                 { return os.MkdirAll(dir, 0o700) }
func (h healingFake) reachServer(context.Context, netspec.Spec) error { return nil }

// TestProbeRule: one probe (probeMount) and one rule (unusable) for every path that asks
// whether a mount is usable. A mount that answers is usable everywhere, one that fails or
// whose daemon is gone is dead everywhere (and a hook's liveMount unmounts it lazily to mount
// again); one that does not answer in time is dead only where it is replaced by a mount
// probed in turn (a heal), and kept, not unmounted, everywhere else.
func TestProbeRule(t *testing.T) {
	noAnswer := fmt.Errorf("stat: %w", bounded.ErrNoAnswer)
	tests := []struct {
		name              string
		probeErr          error
		heals             bool
		gone              error
		wantErr           string // in probeMount's error; "" for nil
		wantDeadForHeal   bool   // unusable(err, true)
		wantDeadElsewhere bool   // unusable(err, false): liveMount unmounts it
	}{
		{name: "answers", heals: true},
		{name: "fails (ENOTCONN)", probeErr: syscall.ENOTCONN, heals: true, wantErr: "not connected", wantDeadForHeal: true, wantDeadElsewhere: true},
		{name: "stale root (ESTALE: the export re-created)", probeErr: &os.PathError{Op: "stat", Path: "/m", Err: syscall.ESTALE}, heals: true,
			wantErr: "export was removed or re-created", wantDeadForHeal: true, wantDeadElsewhere: true},
		{name: "does not answer in time", probeErr: noAnswer, heals: true, wantErr: "no answer", wantDeadForHeal: true},
		{name: "daemon gone though the stat answers", heals: true, gone: errors.New("its daemon is gone (no process in scope x)"),
			wantErr: "daemon is gone", wantDeadForHeal: true, wantDeadElsewhere: true},
		{name: "does not answer, on a system that cannot heal", probeErr: noAnswer, wantErr: "no answer", wantDeadForHeal: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeSystem()
			var sys system = fake
			if tc.heals {
				sys = healingFake{fake, tc.gone}
			}
			path := "/state/mounts/" + testSpec.Key()
			fake.mounted[path] = true
			fake.probeErr[path] = tc.probeErr

			err := probeMount(sys, testSpec, unitFor(testSpec.Key()), path)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("probeMount: %v, want %q", err, tc.wantErr)
			}
			if got := unusable(err, true); got != tc.wantDeadForHeal {
				t.Errorf("unusable for a heal: %v, want %v", got, tc.wantDeadForHeal)
			}
			if got := unusable(err, false); got != tc.wantDeadElsewhere {
				t.Errorf("unusable elsewhere: %v, want %v", got, tc.wantDeadElsewhere)
			}
			live, lerr := liveMount(context.Background(), sys, Config{}.withDefaults(), testSpec, path, true)
			if lerr != nil {
				t.Fatal(lerr)
			}
			unmounted := slices.Contains(fake.unmounts(), "-l "+path)
			if live == tc.wantDeadElsewhere || unmounted != tc.wantDeadElsewhere {
				t.Errorf("liveMount: live %v, unmounted lazily %v; want live %v", live, unmounted, !tc.wantDeadElsewhere)
			}
		})
	}
}

// TestAttemptMount: every mount (first, heal, hook) goes through attemptMount: bounded by
// MountTimeout, the secret kept out of the error, and what a failed attempt that left nothing
// mounted ran in its scope killed (cleared); one that mounted after all is left alone.
func TestAttemptMount(t *testing.T) {
	tests := []struct {
		name        string
		mountErr    error
		mountedAnew bool // the failed attempt mounted after all
		wantCleared bool
		wantKilled  bool
	}{
		{name: "mounted"},
		{name: "failed, nothing mounted", mountErr: errors.New("mount error(13): password=hunter2 refused"), wantCleared: true, wantKilled: true},
		{name: "failed, yet mounted", mountErr: errors.New("exit status 1"), mountedAnew: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeSystem()
			target := t.TempDir() + "/" + testSpec.Key()
			var deadline bool
			fake.mountFn = func(ctx context.Context, _ string, _ int) error {
				_, deadline = ctx.Deadline()
				if tc.mountedAnew {
					fake.mu.Lock()
					fake.mounted[target] = true
					fake.mu.Unlock()
				}
				return tc.mountErr
			}
			c := Config{Log: quietLog()}.withDefaults()
			cleared, err := attemptMount(context.Background(), fake, c, t.TempDir(), testSpec, unitFor(testSpec.Key()), target)
			if (err != nil) != (tc.mountErr != nil) {
				t.Fatalf("attemptMount: %v, want error %v", err, tc.mountErr)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error holds the secret: %v", err)
			}
			if !deadline {
				t.Error("the mount ran without a deadline (MountTimeout)")
			}
			if cleared != tc.wantCleared || (len(fake.killed) > 0) != tc.wantKilled {
				t.Errorf("cleared %v, killed %q; want cleared %v, killed %v", cleared, fake.killed, tc.wantCleared, tc.wantKilled)
			}
		})
	}
}
