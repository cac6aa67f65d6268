// Package netspec describes network filesystem mounts without touching the node: a Spec's type,
// source shape and options, the key that names its host mount, the server it talks to, and the
// redaction of its secrets for logs. It is pure, so that config validation (configs) and the
// mounter (netmount) share one definition without configs depending on the mounter.
package netspec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Spec identifies one network filesystem mount: its type (nfs, nfs4, cifs, glusterfs, ceph,
// fuse.<program> e.g. fuse.sshfs), source (server:/export, //server/share, user@host:/dir, ...)
// and options, in the order given (they are passed to mount -o in that order).
type Spec struct {
	Type    string
	Source  string
	Options []string
}

// keyVersion changes only if Key must change; a new value orphans the mounts of older agents.
const keyVersion = "netmount/v1"

// Key is a short, stable hash of (type, source, options as given; order counts, since mount
// applies options in order) that names the mount's directory under StateDir/mounts and its
// state file. Two specs share a host mount exactly when their keys are equal.
func (s Spec) Key() string {
	h := sha256.New()
	for _, v := range append([]string{keyVersion, s.Type, s.Source}, s.Options...) {
		h.Write([]byte(v))
		h.Write([]byte{0}) // Validate rejects NUL in every field, so this separates them
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// String renders the spec as a mount command line would, "<type> <source> -o <options>", with
// every secret replaced by "***", for logs and errors. Redaction rules:
//
//   - an option key=value whose key contains "pass", "secret" or "token", or ends in "key"
//     (case-insensitive; password=, password2=, pass=, secret=, token=, api_key=, ...) keeps
//     its key and loses its value; keys ending in "file" are exempt, since their value is a
//     path, not the secret (credentials=, secretfile=, passwd_file=, IdentityFile= are kept);
//   - user= and username= keep the user name and lose what follows a '%' (mount.cifs reads
//     "user%password");
//   - an option whose key names a command (ssh_command=, ProxyCommand=, any key ending in
//     "command" or "cmd") loses its whole value: "sshpass -p <password> ssh" is a command;
//   - an option nested in another's value ("opts=password=x") is redacted by these rules;
//   - a password in the source's user information (//user:password@server/share,
//     scheme://user:password@host/..., user:password@host:/dir) is redacted, whatever it
//     holds ('/', ':', '@': the user information ends at the last '@');
//   - everything else (user names, hosts, paths, flags) is kept: it is needed to debug a mount
//     and is not a credential.
func (s Spec) String() string {
	var b strings.Builder
	b.WriteString(s.Type)
	b.WriteByte(' ')
	b.WriteString(RedactSource(s.Source))
	if len(s.Options) > 0 {
		b.WriteString(" -o ")
		for i, o := range s.Options {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(redactOption(o))
		}
	}
	return b.String()
}

const redacted = "***"

// secretKey says whether the value of option key is a secret.
func secretKey(key string) bool {
	k := strings.ToLower(key)
	if strings.HasSuffix(k, "file") {
		return false
	}
	return strings.Contains(k, "pass") || strings.Contains(k, "secret") || strings.Contains(k, "token") ||
		strings.HasSuffix(k, "key")
}

// commandKey says whether the value of option key is a command line (ssh_command=,
// ProxyCommand=): all of it is treated as secret, since a command may carry a password
// anywhere ("sshpass -p <password> ssh").
func commandKey(key string) bool {
	k := strings.ToLower(key)
	return strings.HasSuffix(k, "command") || strings.HasSuffix(k, "cmd")
}

// optionSecret returns the secret part of option o and where it starts, or "" if o has none.
func optionSecret(o string) (secret string, at int) {
	key, val, ok := strings.Cut(o, "=")
	if !ok || val == "" {
		return "", 0
	}
	switch k := strings.ToLower(key); {
	case secretKey(key), commandKey(key):
		return val, len(key) + 1
	case k == "user" || k == "username":
		if i := strings.IndexByte(val, '%'); i >= 0 && i < len(val)-1 {
			return val[i+1:], len(key) + 1 + i + 1
		}
		return "", 0
	}
	if v, i := optionSecret(val); v != "" { // "opts=password=x"
		return v, len(key) + 1 + i
	}
	return "", 0
}

// commandSecrets returns the words of command line cmd that may be passwords: the argument of
// -p, --password or -P (sshpass, mysql-like tools), the rest of a "-pVALUE" word, and the value
// of a word "key=value" whose key names a secret. Redact removes them from messages, where the
// whole command line would rarely occur.
func commandSecrets(cmd string) []string {
	var out []string
	words := strings.Fields(cmd)
	for i, w := range words {
		switch {
		case (w == "-p" || w == "-P" || w == "--password") && i+1 < len(words):
			out = append(out, words[i+1])
		case len(w) > 2 && (strings.HasPrefix(w, "-p") || strings.HasPrefix(w, "-P")):
			out = append(out, w[2:])
		case strings.HasPrefix(w, "--password="):
			out = append(out, strings.TrimPrefix(w, "--password="))
		default:
			if v, _ := optionSecret(strings.TrimPrefix(w, "-o")); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

func redactOption(o string) string {
	secret, at := optionSecret(o)
	if secret == "" {
		return o
	}
	return o[:at] + redacted
}

// sourceSecret returns the password in the source's user information and where it starts, or
// "" if there is none: "//user:pw@server/share", "scheme://user:pw@host/x" and
// "user:pw@host:/dir" have one; "user@host:/dir" (sshfs), "host:/export" (nfs) and
// "user@fsid.fs=/" (ceph) have none. The user information ends at the last '@', so a password
// may hold '/', ':' and '@'; a path with an '@' in it may then be taken for one, which only
// hides more than needed. Only "host:/path@x", where nothing like host:dir follows the '@', is
// taken for a path.
func sourceSecret(src string) (secret string, at int) {
	// "scheme://" and "//" may also be part of a password ("alice://x@host:/dir"): if reading
	// them as a URL or UNC path finds no password, the source is read as user:pw@host too.
	var starts []int
	if i := strings.Index(src, "://"); i > 0 && urlScheme.MatchString(src[:i]) {
		starts = append(starts, i+3)
	}
	if strings.HasPrefix(src, "//") {
		starts = append(starts, 2)
	}
	for _, start := range append(starts, 0) {
		if secret, at := userinfoSecret(src, start); secret != "" {
			return secret, at
		}
	}
	return "", 0
}

var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// userinfoSecret reads src[start:] as [user[:password]@]host...
func userinfoSecret(src string, start int) (secret string, at int) {
	end := strings.LastIndexByte(src, '@')
	if end <= start {
		return "", 0
	}
	userinfo := src[start:end]
	i := strings.IndexByte(userinfo, ':')
	if i < 0 || i == len(userinfo)-1 {
		return "", 0
	}
	if start == 0 && userinfo[i+1] == '/' && !strings.Contains(src[end+1:], ":") {
		return "", 0 // "server:/export/a@b": the '@' is in a path
	}
	return userinfo[i+1:], start + i + 1
}

// RedactSource returns src with the password in its user information, if any, replaced by
// "***".
func RedactSource(src string) string {
	secret, at := sourceSecret(src)
	if secret == "" {
		return src
	}
	return src[:at] + redacted + src[at+len(secret):]
}

// secrets returns every secret value of s, longest first.
func (s Spec) secrets() []string {
	var out []string
	if v, _ := sourceSecret(s.Source); v != "" {
		out = append(out, v)
	}
	for _, o := range s.Options {
		if v, _ := optionSecret(o); v != "" {
			out = append(out, v)
			if key, _, _ := strings.Cut(o, "="); commandKey(key) {
				for _, w := range commandSecrets(v) {
					if w != "" {
						out = append(out, w)
					}
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// Redact replaces every secret of s that occurs in text (a helper's error output, say) by
// "***". Secrets are replaced wherever they occur, even inside other words: a garbled message
// is better than a leaked password.
func (s Spec) Redact(text string) string {
	for _, v := range s.secrets() {
		text = strings.ReplaceAll(text, v, redacted)
	}
	return text
}

// FSType describes what a filesystem type needs on the node and what its source looks like.
type FSType struct {
	Helper       string // mount helper mount(8) runs, e.g. mount.nfs; "" for fuse.*
	Debian, RHEL string // packages providing the helper (for fuse.<program>: the program)
	KernelFS     string // name in /proc/filesystems
	Module       string // module to modprobe for it
	FUSE         bool   // a FUSE filesystem: needs /dev/fuse too
	// Program is the FUSE program of fuse.<program>; "" for other types.
	Program string
	// KnownPackages says Debian and RHEL name the FUSE program's packages.
	KnownPackages bool
	shape         string // the source's shape, for errors
	check         func(src string) bool
}

var fsTypes = map[string]FSType{
	"nfs": {Helper: "mount.nfs", Debian: "nfs-common", RHEL: "nfs-utils", KernelFS: "nfs", Module: "nfs",
		shape: "server:/export", check: hostColonPath},
	"nfs4": {Helper: "mount.nfs4", Debian: "nfs-common", RHEL: "nfs-utils", KernelFS: "nfs4", Module: "nfsv4",
		shape: "server:/export", check: hostColonPath},
	"cifs": {Helper: "mount.cifs", Debian: "cifs-utils", RHEL: "cifs-utils", KernelFS: "cifs", Module: "cifs",
		shape: "//server/share", check: uncPath},
	"glusterfs": {Helper: "mount.glusterfs", Debian: "glusterfs-client", RHEL: "glusterfs-fuse", KernelFS: "fuse", Module: "fuse", FUSE: true,
		shape: "server:/volume", check: hostColonVolume},
	"ceph": {Helper: "mount.ceph", Debian: "ceph-common", RHEL: "ceph-common", KernelFS: "ceph", Module: "ceph",
		shape: "mon1[,mon2]:/path or user@fsid.fsname=/path", check: cephSource},
}

// fuseFS describes fuse.<program> filesystems.
var fuseFS = FSType{KernelFS: "fuse", Module: "fuse", FUSE: true}

// fusePackages names the packages of the FUSE programs we know; others are named generically.
var fusePackages = map[string][2]string{
	"sshfs": {"sshfs", "fuse-sshfs"},
	"s3fs":  {"s3fs", "s3fs-fuse"},
}

var fuseProgram = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`)

// Lookup returns what type t needs on the node.
func Lookup(t string) (FSType, error) {
	if ft, ok := fsTypes[t]; ok {
		return ft, nil
	}
	if prog, ok := strings.CutPrefix(t, "fuse."); ok {
		if !fuseProgram.MatchString(prog) {
			return FSType{}, fmt.Errorf("type %q: the FUSE program after \"fuse.\" must be a program name such as sshfs", t)
		}
		ft := fuseFS
		ft.Program = prog
		if pkgs, ok := fusePackages[prog]; ok {
			ft.Debian, ft.RHEL, ft.KnownPackages = pkgs[0], pkgs[1], true
		}
		if prog == "sshfs" {
			ft.shape, ft.check = "[user@]host:[dir]", sshfsSource
		}
		return ft, nil
	}
	if t == "fuse" {
		return FSType{}, errors.New(`type "fuse" needs the FUSE program: fuse.<program>, e.g. fuse.sshfs`)
	}
	return FSType{}, fmt.Errorf("unknown type %q: want nfs, nfs4, cifs, glusterfs, ceph or fuse.<program> (e.g. fuse.sshfs)", t)
}

// Validate checks s without looking at the node: a known type, a source of that type's shape,
// and options that mount -o can carry. Its messages never contain a secret.
func (s Spec) Validate() error {
	ft, err := Lookup(s.Type)
	if err != nil {
		return err
	}
	switch {
	case s.Source == "":
		return fmt.Errorf("%s mount: source is empty: want %s", s.Type, shapeOf(ft))
	case strings.HasPrefix(s.Source, "-"):
		return fmt.Errorf("%s mount: source %q starts with '-', which mount would read as an option", s.Type, RedactSource(s.Source))
	case strings.ContainsAny(s.Source, "\x00\n"):
		return fmt.Errorf("%s mount: source contains a NUL or newline", s.Type)
	case ft.check != nil && !ft.check(s.Source):
		return fmt.Errorf("%s mount: source %q is not of the form %s", s.Type, RedactSource(s.Source), ft.shape)
	}
	for i, o := range s.Options {
		key, _, _ := strings.Cut(o, "=")
		switch {
		case o == "":
			return fmt.Errorf("%s mount: option %d is empty", s.Type, i+1)
		case strings.Contains(o, ","):
			return fmt.Errorf("%s mount: option %d (%s) contains a comma: give each option as a list item of its own", s.Type, i+1, key)
		case strings.ContainsAny(o, "\x00\n"):
			return fmt.Errorf("%s mount: option %d (%s) contains a NUL or newline", s.Type, i+1, key)
		}
	}
	return s.checkSecrets()
}

func shapeOf(ft FSType) string {
	if ft.shape == "" {
		return "the FUSE program's source"
	}
	return ft.shape
}

// hostColonPath: "server:/export", "[::1]:/export".
func hostColonPath(src string) bool {
	i := strings.Index(src, ":/")
	return i > 0
}

// hostColonVolume: "server:/volume" or "server:volume".
func hostColonVolume(src string) bool {
	host, vol, ok := strings.Cut(src, ":")
	return ok && host != "" && strings.Trim(vol, "/") != ""
}

// uncPath: "//server/share[/path]".
func uncPath(src string) bool {
	rest, ok := strings.CutPrefix(src, "//")
	if !ok {
		return false
	}
	server, share, ok := strings.Cut(rest, "/")
	return ok && server != "" && strings.Trim(share, "/") != ""
}

// cephSource: "mon1,mon2:6789:/path" or "user@fsid.fsname=/path".
func cephSource(src string) bool {
	if i := strings.Index(src, ":/"); i > 0 {
		return true
	}
	at := strings.IndexByte(src, '@')
	eq := strings.Index(src, "=/")
	return at > 0 && eq > at+1
}

// sshfsSource: "[user@]host:[dir]".
func sshfsSource(src string) bool {
	i := strings.LastIndexByte(src, '@')
	host, _, ok := strings.Cut(src[i+1:], ":")
	if strings.HasPrefix(host, "[") { // [::1]:/dir
		end := strings.Index(src[i+1:], "]:")
		return end > 1
	}
	return ok && host != ""
}

// IsNetworkType says whether a config's mount type names a network filesystem this package
// mounts (nfs, nfs4, cifs, glusterfs, ceph, fuse.*), as opposed to a bind.
func IsNetworkType(t string) bool {
	_, known := fsTypes[t]
	return known || t == "fuse" || strings.HasPrefix(t, "fuse.")
}
