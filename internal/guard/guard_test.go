package guard

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestToken(t *testing.T) {
	k1, k2 := []byte(strings.Repeat("a", 32)), []byte(strings.Repeat("b", 32))
	tok := Token(k1, "ctr-1")
	for _, tc := range []struct {
		name  string
		key   []byte
		id    string
		token string
		want  bool
	}{
		{"the plugin's token", k1, "ctr-1", tok, true},
		{"another container's token", k1, "ctr-2", tok, false},
		{"another node's key", k2, "ctr-1", tok, false},
		{"no token", k1, "ctr-1", "", false},
		{"a guessed token", k1, "ctr-1", strings.Repeat("0", len(tok)), false},
	} {
		if got := Valid(tc.key, tc.id, tc.token); got != tc.want {
			t.Errorf("%s: Valid = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSigner: a Signer's tokens are the hex HMAC-SHA256 of the container ID under the key, call
// after call (its kept HMAC state is reset), as Token's are; another key makes other tokens.
func TestSigner(t *testing.T) {
	k1, k2 := []byte(strings.Repeat("a", 32)), []byte(strings.Repeat("b", 32))
	s := NewSigner(k1)
	for _, id := range []string{"ctr-1", "ctr-2", "ctr-1", strings.Repeat("f", 64)} {
		mac := hmac.New(sha256.New, k1)
		mac.Write([]byte(id))
		want := hex.EncodeToString(mac.Sum(nil))
		if got := s.Token(id); got != want || Token(k1, id) != want || !Valid(k1, id, got) {
			t.Errorf("Signer.Token(%q) = %q, want %q", id, got, want)
		}
	}
	if NewSigner(k2).Token("ctr-1") == s.Token("ctr-1") {
		t.Error("two keys' Signers made the same token")
	}
}

func TestKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if _, err := LoadKey(dir); err == nil {
		t.Fatal("LoadKey found a key in an empty dir")
	}
	k, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreateKey(dir)
	if err != nil || string(again) != string(k) {
		t.Fatalf("a second LoadOrCreateKey changed the key (%v)", err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(dir); err == nil || !strings.Contains(err.Error(), "replaces it when it starts") {
		t.Errorf("a truncated key: %v, want an error that says what to do", err)
	}
}
