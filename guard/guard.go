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
)

// Annotation is the spec annotation that carries the token.
const Annotation = "mountkeeper.dev/handled"

// Token is the annotation value that proves the plugin handled container id.
func Token(key []byte, id string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	return hex.EncodeToString(mac.Sum(nil))
}

// Valid says whether token proves the plugin handled container id.
func Valid(key []byte, id, token string) bool {
	want := Token(key, id)
	return hmac.Equal([]byte(want), []byte(token))
}
