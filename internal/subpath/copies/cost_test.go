package copies

import "testing"

// TestEntryCost: every entry costs at least a page; content is rounded up to pages.
func TestEntryCost(t *testing.T) {
	for _, tt := range []struct{ size, want int64 }{{0, 4096}, {1, 4096}, {4096, 4096}, {4097, 8192}, {1_048_000, 1_048_576}} {
		if got := EntryCost(tt.size); got != tt.want {
			t.Errorf("EntryCost(%d) = %d, want %d", tt.size, got, tt.want)
		}
	}
}
