package nri

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/specmod/specmodtest"
)

const testConfig = `
runtimeClasses:
  default:
    mounts:
      - {source: /srv/default, destination: /default}
  fast:
    allowBidirectionalForUnprivileged: true
    mounts:
      - {source: /srv/private, destination: /private, propagation: None}
      - {source: /srv/slave, destination: /slave, propagation: HostToContainer, readOnly: true}
      - {source: /srv/shared, destination: /shared, propagation: Bidirectional, options: [nosuid]}
`

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func mustConfig(t testing.TB, text string) *configs.Config {
	t.Helper()
	cfg, err := configs.Parse([]byte(text))
	if err != nil {
		t.Fatalf("parse test config: %v", err)
	}
	if !strings.Contains(text, "stateDir:") {
		cfg.StateDir = testStateDir(t) // the guard key and subPath copies stay in the test
	}
	return cfg
}

// stateDirs is each test's state dir: the configs of one test share it, as a running agent's
// do (a reload cannot move it).
var stateDirs sync.Map // testing.TB -> string

func testStateDir(t testing.TB) string {
	if dir, ok := stateDirs.Load(t); ok {
		return dir.(string)
	}
	dir := t.TempDir()
	stateDirs.Store(t, dir)
	t.Cleanup(func() { stateDirs.Delete(t) })
	return dir
}

func mountStrings(ms []*api.Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Source+"->"+m.Destination+":"+strings.Join(m.Options, ","))
	}
	return out
}

func TestCreateContainer(t *testing.T) {
	tests := []struct {
		name     string
		handler  string
		existing []*api.Mount
		fail     map[string]string
		want     []string // mounts added, as source->destination:options
		wantErr  []string // substrings of the error
	}{
		{
			name:    "class mounts get explicit propagation",
			handler: "fast",
			want: []string{
				"/srv/private->/private:rbind,rprivate",
				"/srv/slave->/slave:rbind,rslave,ro",
				"/srv/shared->/shared:rbind,rshared,nosuid",
			},
		},
		{
			name:    "empty handler is the default class",
			handler: "",
			want:    []string{"/srv/default->/default:rbind,rprivate"},
		},
		{
			name:    "handler without class is left alone",
			handler: "kata",
		},
		{
			name:     "existing mounts elsewhere do not matter",
			handler:  "fast",
			existing: []*api.Mount{{Source: "/var/lib/kubelet/pods/x/volumes/v", Destination: "/data", Type: "bind"}},
			want: []string{
				"/srv/private->/private:rbind,rprivate",
				"/srv/slave->/slave:rbind,rslave,ro",
				"/srv/shared->/shared:rbind,rshared,nosuid",
			},
		},
		{
			name:     "collision with a pod volume fails, naming both",
			handler:  "fast",
			existing: []*api.Mount{{Source: "/var/lib/kubelet/pods/x/volumes/v", Destination: "/slave", Type: "bind"}},
			wantErr:  []string{`runtime class "fast"`, "ns/pod/app", "/srv/slave -> /slave", "already has a mount at /slave", "/var/lib/kubelet/pods/x/volumes/v"},
		},
		{
			name:    "host problems fail the container, every one named",
			handler: "fast",
			fail:    map[string]string{"/srv/private": "gone", "/srv/shared": "not shared"},
			wantErr: []string{"/srv/private -> /private (rprivate): gone", "/srv/shared -> /shared (rshared): not shared"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := &specmodtest.Host{Fail: tc.fail}
			p := NewPlugin(mustConfig(t, testConfig), true, host, quietLogger())
			pod := &api.PodSandbox{Name: "pod", Namespace: "ns", RuntimeHandler: tc.handler}
			ctr := &api.Container{Name: "app", Mounts: tc.existing}
			adj, upd, err := p.CreateContainer(context.Background(), pod, ctr)
			if upd != nil {
				t.Errorf("updates to other containers: %v", upd)
			}
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error; adjustment %v", adj)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			got := mountStrings(adj.GetMounts())
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("mounts\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestConfigureTakesRuntimeConfigUnlessPinned(t *testing.T) {
	other := "stateDir: " + t.TempDir() + "\nruntimeClasses:\n  other:\n    mounts: [{source: /o, destination: /o}]\n"
	for _, pinned := range []bool{false, true} {
		p := NewPlugin(mustConfig(t, testConfig), pinned, &specmodtest.Host{}, quietLogger())
		if _, err := p.Configure(context.Background(), other, "test", "1"); err != nil {
			t.Fatalf("pinned=%v: Configure: %v", pinned, err)
		}
		_, _, has := p.config().Class("other")
		if has == pinned {
			t.Errorf("pinned=%v: runtime config in use = %v", pinned, has)
		}
	}
	p := NewPlugin(mustConfig(t, testConfig), false, &specmodtest.Host{}, quietLogger())
	_, err := p.Configure(context.Background(), "runtimeClasses: {x: {mounts: []}}", "test", "1")
	if err == nil || !strings.Contains(err.Error(), `runtime class "x" has no mounts`) {
		t.Errorf("invalid runtime config: got %v", err)
	}
}
