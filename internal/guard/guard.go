// Package guard lets a runtime refuse a container of a runtime class that the mountkeeper NRI
// plugin did not handle: while the plugin is away (restarting, rolled out, not yet connected
// after a reboot) the runtime creates containers unadjusted, i.e. without their class mounts.
//
// The plugin marks every container it gives class mounts with an annotation whose value is a
// token: an HMAC of the container ID under a key only root can read (Key, in the state dir).
// An OCI hook that the runtime runs for that class's containers only (a per-handler base spec
// in containerd) checks the token and fails the container without it. A tenant cannot forge
// the token by annotating its pod: it does not know the key, and the token is bound to the
// container ID the runtime chose.
package guard

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

// Annotation is the spec annotation that carries the token.
const Annotation = "mountkeeper.dev/handled"

// Token is the annotation value that proves the plugin handled container id.
func Token(key []byte, id string) string { return NewSigner(key).Token(id) }

// Signer makes the tokens of one key. It keeps the key's HMAC state, so that a token costs
// hashing the container ID only, not the key again. It is safe for concurrent use.
type Signer struct {
	mu  sync.Mutex
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// NewSigner returns the Signer of key.
func NewSigner(key []byte) *Signer { return &Signer{mac: hmac.New(sha256.New, key)} }

// Token is Token(key, id) for the Signer's key.
func (s *Signer) Token(id string) string {
	var out [2 * sha256.Size]byte
	s.mu.Lock()
	s.mac.Reset()
	s.buf = append(s.buf[:0], id...)
	s.mac.Write(s.buf)
	hex.Encode(out[:], s.mac.Sum(s.sum[:0]))
	s.mu.Unlock()
	return string(out[:])
}

// Valid says whether token proves the plugin handled container id.
func Valid(key []byte, id, token string) bool {
	want := Token(key, id)
	return hmac.Equal([]byte(want), []byte(token))
}
