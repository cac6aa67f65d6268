package configs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/configs"
)

// TestSubPathCopiesResolved: the budgets' defaults are resolved at load, sizes take binary
// suffixes, and a partial block keeps the defaults of the keys it leaves out.
func TestSubPathCopiesResolved(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want configs.SubPathCopies
	}{
		{"defaults", "", configs.SubPathCopies{PodBytes: 32 << 20, PodEntries: 4096, NodeBytes: 256 << 20, NodeEntries: 65536, Timeout: time.Second}},
		{"all set", "subPathCopies: {podBytes: 1Mi, podEntries: 100, nodeBytes: 1Gi, nodeEntries: 1000, timeout: 500ms}\n",
			configs.SubPathCopies{PodBytes: 1 << 20, PodEntries: 100, NodeBytes: 1 << 30, NodeEntries: 1000, Timeout: 500 * time.Millisecond}},
		{"plain bytes and a partial block", "subPathCopies: {podBytes: 65536, nodeBytes: 16Mi}\n",
			configs.SubPathCopies{PodBytes: 65536, PodEntries: 4096, NodeBytes: 16 << 20, NodeEntries: 65536, Timeout: time.Second}},
		{"a short createBudget shortens the default timeout", "createBudget: 300ms\n",
			configs.SubPathCopies{PodBytes: 32 << 20, PodEntries: 4096, NodeBytes: 256 << 20, NodeEntries: 65536, Timeout: 200 * time.Millisecond}},
		{"kibibytes", "subPathCopies: {podBytes: 64Ki}\n",
			configs.SubPathCopies{PodBytes: 64 << 10, PodEntries: 4096, NodeBytes: 256 << 20, NodeEntries: 65536, Timeout: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := configs.Parse([]byte(tt.yaml + oneMount("{source: /srv/a, destination: /a}")))
			if err != nil {
				t.Fatal(err)
			}
			if c.SubPathCopies != tt.want {
				t.Errorf("SubPathCopies = %+v, want %+v", c.SubPathCopies, tt.want)
			}
		})
	}
}

func TestSubPathCopiesInvalid(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"decimal suffix", "subPathCopies: {podBytes: 16M}\n", []string{`size "16M": write bytes as an integer or with Ki, Mi or Gi`}},
		{"not a number", "subPathCopies: {nodeBytes: lots}\n", []string{`size "lots"`}},
		{"negative", "subPathCopies: {podEntries: -1}\n", []string{"subPathCopies.podEntries is negative"}},
		{"below a page", "subPathCopies: {podBytes: 100}\n", []string{"subPathCopies.podBytes 100 is below one page (4096 bytes)"}},
		{"pod above node bytes", "subPathCopies: {podBytes: 512Mi}\n",
			[]string{"subPathCopies.podBytes 536870912 is larger than subPathCopies.nodeBytes 268435456: one pod could take the whole node pool"}},
		{"pod above node entries", "subPathCopies: {podEntries: 10, nodeEntries: 5}\n",
			[]string{"subPathCopies.podEntries 10 is larger than subPathCopies.nodeEntries 5"}},
		{"timeout not below createBudget", "subPathCopies: {timeout: 1500ms}\n",
			[]string{"subPathCopies.timeout 1.5s must be below createBudget 1.5s"}},
		{"unknown key", "subPathCopies: {podBites: 1Mi}\n", []string{"field podBites not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := configs.Parse([]byte(tt.yaml + oneMount("{source: /srv/a, destination: /a}")))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
