package netspec

import (
	"fmt"
	"strings"
)

// Secrets never go on a command line: mount(8), the helper it runs, mount.fuse's "sh -c" and
// the FUSE program all show their arguments to every local user in /proc/<pid>/cmdline, and
// systemd-run shows them in its unit. CIFS and Ceph read their secret from a file: a spec of
// those types may give it inline (password=, user=name%password; secret=), and the mounter
// writes it to a root-only file (WithSecretFile). Any other inline secret is refused by
// Validate, with what to use instead.

// fileSecretKind is the option through which type typ reads the secrets mountkeeper writes
// to a file: "" means none.
func fileSecretKind(typ string) string {
	switch typ {
	case "cifs":
		return "credentials"
	case "ceph":
		return "secretfile"
	}
	return ""
}

// fileSecret says whether option o is an inline secret that WithSecretFile moves to the file.
func fileSecret(typ, o string) bool {
	key, val, _ := strings.Cut(o, "=")
	k := strings.ToLower(key)
	switch typ {
	case "cifs":
		return k == "password" || k == "pass" || ((k == "user" || k == "username") && strings.Contains(val, "%"))
	case "ceph":
		return k == "secret"
	}
	return false
}

// instead says what to use instead of an inline secret for type typ.
func instead(typ string) string {
	switch {
	case typ == "cifs":
		return "use password= (mountkeeper hands it to mount.cifs in a credentials file) or credentials= instead"
	case typ == "ceph":
		return "use secret= (mountkeeper hands it to mount.ceph in a secretfile) or secretfile= instead"
	case typ == "fuse.sshfs":
		return "use a key file (IdentityFile=) instead"
	case typ == "fuse.s3fs":
		return "use the program's option that reads the secret from a file (passwd_file= for s3fs) instead"
	case strings.HasPrefix(typ, "fuse."):
		return "use the program's option that reads the secret from a file instead"
	case typ == "nfs" || typ == "nfs4":
		return typ + " takes no password: use Kerberos (sec=krb5) instead"
	}
	return typ + " takes no password on its mount: remove it"
}

// commandHasSecret says whether command line cmd (an ssh_command= value) carries a password:
// sshpass with -p, or a word key=value whose key names a secret. "ssh -p 2222" has none.
func commandHasSecret(cmd string) bool {
	words := strings.Fields(cmd)
	for i, w := range words {
		if strings.HasPrefix(w, "--password") {
			return true
		}
		if v, _ := optionSecret(strings.TrimPrefix(w, "-o")); v != "" {
			return true
		}
		if strings.HasSuffix(w, "sshpass") {
			for _, a := range words[i+1:] {
				if strings.HasPrefix(a, "-p") {
					return true
				}
			}
		}
	}
	return false
}

// checkSecrets refuses the inline secrets that would reach a command line. Its messages name
// the option's position and key, never its value.
func (s Spec) checkSecrets() error {
	const where = "command lines (mount, the helper, the FUSE program: /proc/<pid>/cmdline)"
	if v, _ := sourceSecret(s.Source); v != "" {
		return fmt.Errorf("%s mount: the source's password would be on %s: %s", s.Type, where, instead(s.Type))
	}
	for i, o := range s.Options {
		key, val, _ := strings.Cut(o, "=")
		secret, _ := optionSecret(o)
		switch {
		case secret == "", fileSecret(s.Type, o):
			continue
		case commandKey(key) && !commandHasSecret(val):
			continue
		}
		return fmt.Errorf("%s mount: option %d (%s) would put a secret on %s: %s", s.Type, i+1, key, where, instead(s.Type))
	}
	return nil
}

// WithSecretFile returns the spec to put on the command line, with the inline secrets of s
// replaced by one option naming path (credentials=path for CIFS, secretfile=path for Ceph),
// and what the mounter must write at path (0600, root only) first. ok is false when s has no
// secret to move; the spec is then s itself.
func (s Spec) WithSecretFile(path string) (cmd Spec, content []byte, ok bool) {
	kind := fileSecretKind(s.Type)
	if kind == "" {
		return s, nil, false
	}
	var b strings.Builder
	opts := make([]string, 0, len(s.Options))
	for _, o := range s.Options {
		if !fileSecret(s.Type, o) {
			opts = append(opts, o)
			continue
		}
		key, val, _ := strings.Cut(o, "=")
		switch k := strings.ToLower(key); {
		case kind == "secretfile":
			b.WriteString(val + "\n")
		case k == "user" || k == "username":
			user, pw, _ := strings.Cut(val, "%")
			fmt.Fprintf(&b, "username=%s\npassword=%s\n", user, pw)
			opts = append(opts, key+"="+user)
		default:
			fmt.Fprintf(&b, "password=%s\n", val)
		}
		if !ok {
			opts = append(opts, kind+"="+path)
			ok = true
		}
	}
	if !ok {
		return s, nil, false
	}
	return Spec{Type: s.Type, Source: s.Source, Options: opts}, []byte(b.String()), true
}

// Redacted returns s with every secret replaced by "***", as String shows it: what a state
// file may keep.
func (s Spec) Redacted() Spec {
	opts := make([]string, len(s.Options))
	for i, o := range s.Options {
		opts[i] = redactOption(o)
	}
	if len(s.Options) == 0 {
		opts = s.Options
	}
	return Spec{Type: s.Type, Source: RedactSource(s.Source), Options: opts}
}
