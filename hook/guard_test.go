package hook

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/guard"
)

func TestGuard(t *testing.T) {
	stateDir := t.TempDir()
	state := func(id string, annotations map[string]string) string {
		b, _ := json.Marshal(map[string]any{"ociVersion": "1.2.0", "id": id, "status": "creating", "pid": 1, "bundle": "/b", "annotations": annotations})
		return string(b)
	}
	if err := Guard(strings.NewReader(state("c1", nil)), "mk", stateDir); err == nil || !strings.Contains(err.Error(), "has not handled any container") {
		t.Errorf("no key on the node: %v, want a refusal saying the plugin never ran", err)
	}
	key, err := guard.LoadOrCreateKey(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{"io.kubernetes.cri.sandbox-namespace": "ns", "io.kubernetes.cri.sandbox-name": "pod", "io.kubernetes.cri.container-name": "app"}
	with := func(token string) map[string]string {
		a := map[string]string{guard.Annotation: token}
		for k, v := range names {
			a[k] = v
		}
		return a
	}
	for _, tc := range []struct {
		name, id    string
		annotations map[string]string
		wantErr     string
	}{
		{"handled by the plugin", "c1", with(guard.Token(key, "c1")), ""},
		{"not handled (plugin away)", "c1", names, `mountkeeper: runtime class "mk", container ns/pod/app: the mountkeeper NRI plugin did not handle this container`},
		{"a token copied from another container", "c2", with(guard.Token(key, "c1")), "did not handle"},
		{"a token a tenant made up", "c1", with("deadbeef"), "did not handle"},
	} {
		err := Guard(strings.NewReader(state(tc.id, tc.annotations)), "mk", stateDir)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.wantErr)
		}
	}
	// Every refusal is counted in the state dir, where the agent reads it (metrics).
	counts, err := guard.ReadRefusals(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[guard.Refusal]uint64{{Class: "mk", Reason: guard.ReasonNoKey}: 1, {Class: "mk", Reason: guard.ReasonNotHandled}: 3}
	if len(counts) != len(want) {
		t.Errorf("recorded refusals %v, want %v", counts, want)
	}
	for r, n := range want {
		if counts[r] != n {
			t.Errorf("recorded refusals %v, want %v", counts, want)
		}
	}
}
