package netmount

import (
	"fmt"
	"strings"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// explainMountError adds to a failed mount's error what the helper's words mean for s and
// the fix, where the helper's own words do not say it. mount.cifs reports a login the server
// refused only as "mount error(13): Permission denied" (the kernel's EACCES from the SMB
// session setup or tree connect), which names neither the server, the share, the user nor
// where the password came from. s is the spec as configured (before its inline secrets went
// to a file), so the message names the operator's own credentials file, not mountkeeper's.
// The text never holds a secret: it names options, not their values (but for the user name
// and the credentials file's path, which are not secret).
func explainMountError(s netspec.Spec, err error) error {
	if hint := mountErrorHint(s, err.Error()); hint != "" {
		return fmt.Errorf("%w: %s", err, hint)
	}
	return err
}

// mountErrorHint is explainMountError's text, "" when it has none.
func mountErrorHint(s netspec.Spec, text string) string {
	if s.Type != "cifs" || !strings.Contains(text, "mount error(13)") {
		return ""
	}
	server := "the SMB server"
	if addr, err := s.ServerAddress(); err == nil {
		server += " " + addr
	}
	user, credentials, inline := "", "", false
	for _, o := range s.Options {
		k, v, _ := strings.Cut(o, "=")
		switch strings.ToLower(k) {
		case "user", "username":
			user, _, _ = strings.Cut(v, "%")
			inline = inline || strings.Contains(v, "%")
		case "credentials", "cred":
			credentials = v
		case "password", "pass":
			inline = true
		}
	}
	who := "the user"
	if user != "" {
		who = "user " + user
	}
	where, then := "the username and password the mount gives", "the next mount attempt uses them"
	switch {
	case inline:
		where, then = "the class's username and password= option", "a reloaded config with the new password mounts anew"
	case credentials != "":
		where = fmt.Sprintf("the username and password in the credentials file %s (credentials=)", credentials)
		then = "the next mount attempt reads the file again"
	}
	return fmt.Sprintf("%s refused %s for share %s: authentication failed (a wrong username or password), or the user may not use this share: "+
		"check %s against the server's account and the share's allowed users; %s",
		server, who, s.Source, where, then)
}
