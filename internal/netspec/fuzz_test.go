package netspec

import (
	"strings"
	"testing"
)

// redactShapes put a secret where a config may carry one: in a source's user information and
// in options, plain, after a user name, inside a command and nested in another option.
var redactShapes = []func(secret string) (spec Spec, public string){
	func(s string) (Spec, string) {
		return Spec{Type: "cifs", Source: "//alice:" + s + "@srv/share"}, "cifs //alice:***@srv/share"
	},
	func(s string) (Spec, string) {
		return Spec{Type: "fuse.sshfs", Source: "alice:" + s + "@host:/dir"}, "fuse.sshfs alice:***@host:/dir"
	},
	func(s string) (Spec, string) {
		return Spec{Type: "fuse.davfs", Source: "https://bob:" + s + "@dav.example/x"}, "fuse.davfs https://bob:***@dav.example/x"
	},
	func(s string) (Spec, string) {
		return Spec{Type: "cifs", Source: "//srv/share", Options: []string{"username=bob", "password=" + s}},
			"cifs //srv/share -o username=bob,password=***"
	},
	func(s string) (Spec, string) {
		return Spec{Type: "cifs", Source: "//srv/share", Options: []string{"user=bob%" + s}}, "cifs //srv/share -o user=bob%***"
	},
	func(s string) (Spec, string) {
		return Spec{Type: "ceph", Source: "mon1:/vol", Options: []string{"name=admin", "secret=" + s}}, "ceph mon1:/vol -o name=admin,secret=***"
	},
	func(s string) (Spec, string) {
		return Spec{Type: "fuse.sshfs", Source: "alice@host:/dir", Options: []string{"ssh_command=sshpass -p " + s + " ssh"}},
			"fuse.sshfs alice@host:/dir -o ssh_command=***"
	},
	func(s string) (Spec, string) {
		return Spec{Type: "fuse.sshfs", Source: "alice@host:/dir", Options: []string{"ProxyCommand=sshpass -p " + s + " ssh -W %h:%p j"}},
			"fuse.sshfs alice@host:/dir -o ProxyCommand=***"
	},
	func(s string) (Spec, string) {
		return Spec{Type: "fuse.s3fs", Source: "bucket", Options: []string{"opts=api_key=" + s}}, "fuse.s3fs bucket -o opts=api_key=***"
	},
}

// firstCommandShape is the first of redactShapes that puts the secret in a command line.
const firstCommandShape = 6

// FuzzRedact checks that no secret, whatever its characters, survives into String(),
// Redact() of a helper's message, or Validate's error.
func FuzzRedact(f *testing.F) {
	for _, seed := range []string{"hunter2", "pa/ss", "0000/0", "p@ss@word", "/leading", "a:b:c", "x y z", "%pct%", "=eq=", "s3cr3t//@:"} {
		for shape := range redactShapes {
			f.Add(seed, uint8(shape))
		}
	}
	f.Fuzz(func(t *testing.T, secret string, shape uint8) {
		if secret == "" || strings.ContainsAny(secret, ",\x00\n") {
			return // an option cannot carry these (Validate refuses them)
		}
		if strings.Contains(secret, "*") {
			return // the redaction mark itself would make up the secret ("* 0" in "*** 0")
		}
		i := int(shape) % len(redactShapes)
		if i >= firstCommandShape && len(strings.Fields(secret)) != 1 {
			return // a command's password is one word of it
		}
		spec, public := redactShapes[i](secret)
		if strings.Contains(public, secret) {
			return // the secret is part of the text that is not secret: nothing to find
		}
		if got := spec.String(); strings.Contains(got, secret) {
			t.Errorf("String() = %q shows secret %q", got, secret)
		}
		msg := "mount error(13): Permission denied for " + secret + "."
		if got := spec.Redact(msg); strings.Contains(got, secret) {
			t.Errorf("Redact(%q) = %q shows secret %q", msg, got, secret)
		}
		if err := spec.Validate(); err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("Validate() = %q shows secret %q", err, secret)
		}
	})
}
