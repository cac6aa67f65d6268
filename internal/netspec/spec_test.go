package netspec

import (
	"regexp"
	"strings"
	"testing"
)

func TestKeyIsStable(t *testing.T) {
	// Keys name host mounts that outlive the agent: a new agent must compute the same ones. The
	// values are sha256("netmount/v1\x00" + type + "\x00" + source + "\x00" + each option + "\x00"),
	// checked with sha256sum(1).
	tests := []struct {
		spec Spec
		want string
	}{
		{spec: Spec{Type: "nfs", Source: "server:/export"}, want: "c25198b254090c62"},
		{spec: Spec{Type: "fuse.sshfs", Source: "root@127.0.0.1:/srv", Options: []string{"port=2222", "IdentityFile=/k"}}, want: "ccd6631acd1147b2"},
		{spec: Spec{Type: "cifs", Source: "//srv/share", Options: []string{"password=hunter2"}}, want: "970a256805c2d50b"},
	}
	for _, tt := range tests {
		t.Run(tt.spec.Type, func(t *testing.T) {
			if got := tt.spec.Key(); got != tt.want {
				t.Errorf("%s.Key() = %s, want %s (a changed key orphans the mounts of running nodes)", tt.spec, got, tt.want)
			}
		})
	}
}

func TestKeyDistinguishes(t *testing.T) {
	base := Spec{Type: "nfs", Source: "server:/export", Options: []string{"ro", "vers=4.2"}}
	others := []Spec{
		{Type: "nfs4", Source: "server:/export", Options: []string{"ro", "vers=4.2"}},
		{Type: "nfs", Source: "server:/export2", Options: []string{"ro", "vers=4.2"}},
		{Type: "nfs", Source: "server:/export", Options: []string{"vers=4.2", "ro"}}, // order counts
		{Type: "nfs", Source: "server:/export", Options: []string{"ro"}},
		{Type: "nfs", Source: "server:/export", Options: []string{"ro", "vers=4.2", ""}},
		{Type: "nfs", Source: "server:/export", Options: []string{"ro,vers=4.2"}},
		{Type: "nfs", Source: "server:/exportro", Options: []string{"vers=4.2"}},
	}
	key := base.Key()
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(key) {
		t.Fatalf("Key() = %q, want 16 hex digits", key)
	}
	same := Spec{Type: "nfs", Source: "server:/export", Options: []string{"ro", "vers=4.2"}}
	if same.Key() != key {
		t.Errorf("equal specs got keys %s and %s", key, same.Key())
	}
	for _, o := range others {
		if o.Key() == key {
			t.Errorf("%#v and %#v share key %s", base, o, key)
		}
	}
}

func TestStringRedacts(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		want    string
		secrets []string // must not appear in String() nor in Redact(text with them)
	}{
		{
			name: "sshfs keeps paths and user",
			spec: Spec{Type: "fuse.sshfs", Source: "root@10.0.0.1:/srv", Options: []string{"port=22", "IdentityFile=/etc/mk/id", "reconnect"}},
			want: "fuse.sshfs root@10.0.0.1:/srv -o port=22,IdentityFile=/etc/mk/id,reconnect",
		},
		{
			name:    "cifs password and credentials file",
			spec:    Spec{Type: "cifs", Source: "//srv/share", Options: []string{"username=bob", "password=hunter2", "credentials=/etc/cifs.cred", "domain=CORP"}},
			want:    "cifs //srv/share -o username=bob,password=***,credentials=/etc/cifs.cred,domain=CORP",
			secrets: []string{"hunter2"},
		},
		{
			name:    "cifs user%password",
			spec:    Spec{Type: "cifs", Source: "//srv/share", Options: []string{"user=bob%s3cr3tpw", "password2=zz9plural"}},
			want:    "cifs //srv/share -o user=bob%***,password2=***",
			secrets: []string{"s3cr3tpw", "zz9plural"},
		},
		{
			name:    "ceph secret and secretfile",
			spec:    Spec{Type: "ceph", Source: "mon1,mon2:/vol", Options: []string{"name=admin", "secret=AQBx==", "secretfile=/etc/ceph/admin.secret"}},
			want:    "ceph mon1,mon2:/vol -o name=admin,secret=***,secretfile=/etc/ceph/admin.secret",
			secrets: []string{"AQBx=="},
		},
		{
			name:    "case, pass=, token and key suffixes",
			spec:    Spec{Type: "fuse.s3fs", Source: "bucket", Options: []string{"PASS=Upper1", "Passwd=Upper2", "auth_token=tok3n", "api_key=k3y", "passwd_file=/etc/passwd-s3fs"}},
			want:    "fuse.s3fs bucket -o PASS=***,Passwd=***,auth_token=***,api_key=***,passwd_file=/etc/passwd-s3fs",
			secrets: []string{"Upper1", "Upper2", "tok3n", "k3y"},
		},
		{
			name:    "password in the source",
			spec:    Spec{Type: "cifs", Source: "//bob:pa55word@srv/share"},
			want:    "cifs //bob:***@srv/share",
			secrets: []string{"pa55word"},
		},
		{
			name:    "password in a URL source",
			spec:    Spec{Type: "fuse.davfs", Source: "https://bob:pa55word@dav.example/x"},
			want:    "fuse.davfs https://bob:***@dav.example/x",
			secrets: []string{"pa55word"},
		},
		{
			name:    "a '/' in a source password",
			spec:    Spec{Type: "cifs", Source: "//alice:pa/ss@srv/share"},
			want:    "cifs //alice:***@srv/share",
			secrets: []string{"pa/ss"},
		},
		{
			name:    "a '/' in an sshfs source password",
			spec:    Spec{Type: "fuse.sshfs", Source: "alice:0000/0@host:/dir"},
			want:    "fuse.sshfs alice:***@host:/dir",
			secrets: []string{"0000/0"},
		},
		{
			name:    "an '@' in a source password",
			spec:    Spec{Type: "fuse.sshfs", Source: "alice:p@ssw0rd@host:/dir"},
			want:    "fuse.sshfs alice:***@host:/dir",
			secrets: []string{"p@ssw0rd"},
		},
		{
			name:    "a password starting with '/' before host:dir",
			spec:    Spec{Type: "fuse.sshfs", Source: "alice:/pw9x@host:/dir"},
			want:    "fuse.sshfs alice:***@host:/dir",
			secrets: []string{"/pw9x"},
		},
		{
			name:    "a password inside a command option",
			spec:    Spec{Type: "fuse.sshfs", Source: "alice@host:/dir", Options: []string{"ssh_command=sshpass -p s3cr3tpw ssh", "ProxyCommand=sshpass -p pr0xypw ssh -W %h:%p jump"}},
			want:    "fuse.sshfs alice@host:/dir -o ssh_command=***,ProxyCommand=***",
			secrets: []string{"s3cr3tpw", "pr0xypw"},
		},
		{
			name:    "a secret option nested in another option's value",
			spec:    Spec{Type: "fuse.s3fs", Source: "bucket", Options: []string{"opts=password=n3st3d"}},
			want:    "fuse.s3fs bucket -o opts=password=***",
			secrets: []string{"n3st3d"},
		},
		{
			name: "flags and empty values stay",
			spec: Spec{Type: "fuse.sshfs", Source: "h:", Options: []string{"password_stdin", "password="}},
			want: "fuse.sshfs h: -o password_stdin,password=",
		},
		{
			name: "an @ in a path is no user information",
			spec: Spec{Type: "nfs", Source: "srv:/a:b@c"},
			want: "nfs srv:/a:b@c",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.spec.String()
			if got != tt.want {
				t.Errorf("String()\ngot:  %s\nwant: %s", got, tt.want)
			}
			text := "mount error(13): " + strings.Join(tt.secrets, " and ") + " rejected"
			redactedText := tt.spec.Redact(text)
			for _, s := range tt.secrets {
				if strings.Contains(got, s) {
					t.Errorf("String() = %s shows secret %q", got, s)
				}
				if strings.Contains(redactedText, s) {
					t.Errorf("Redact(%q) = %q shows secret %q", text, redactedText, s)
				}
			}
			if err := tt.spec.Validate(); err != nil {
				for _, s := range tt.secrets {
					if strings.Contains(err.Error(), s) {
						t.Errorf("Validate() error %q shows secret %q", err, s)
					}
				}
			}
		})
	}
}

func TestRedactLongestFirst(t *testing.T) {
	s := Spec{Type: "cifs", Source: "//srv/share", Options: []string{"password=abc", "password2=abcdef"}}
	if got, want := s.Redact("x abcdef y abc z"), "x *** y *** z"; got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string // error substring; "" means valid
	}{
		{name: "nfs", spec: Spec{Type: "nfs", Source: "server:/export"}},
		{name: "nfs ipv6", spec: Spec{Type: "nfs", Source: "[fd00::1]:/export"}},
		{name: "nfs4 with options", spec: Spec{Type: "nfs4", Source: "server:/", Options: []string{"ro", "vers=4.2"}}},
		{name: "cifs", spec: Spec{Type: "cifs", Source: "//server/share/sub"}},
		{name: "glusterfs", spec: Spec{Type: "glusterfs", Source: "server:/volume"}},
		{name: "glusterfs no slash", spec: Spec{Type: "glusterfs", Source: "server:volume"}},
		{name: "ceph legacy", spec: Spec{Type: "ceph", Source: "10.0.0.1:6789,10.0.0.2:6789:/"}},
		{name: "ceph new syntax", spec: Spec{Type: "ceph", Source: "admin@b3acfc0d-575f-41d3-9c91-0e7ed3dbb3fa.cephfs=/"}},
		{name: "sshfs", spec: Spec{Type: "fuse.sshfs", Source: "root@127.0.0.1:/srv"}},
		{name: "sshfs home dir", spec: Spec{Type: "fuse.sshfs", Source: "host:"}},
		{name: "sshfs ipv6", spec: Spec{Type: "fuse.sshfs", Source: "u@[::1]:/srv"}},
		{name: "other fuse", spec: Spec{Type: "fuse.s3fs", Source: "mybucket"}},

		{name: "unknown type", spec: Spec{Type: "ext4", Source: "/dev/sda"}, want: `unknown type "ext4": want nfs, nfs4, cifs, glusterfs, ceph or fuse.<program>`},
		{name: "empty type", spec: Spec{Source: "server:/x"}, want: `unknown type ""`},
		{name: "bare fuse", spec: Spec{Type: "fuse", Source: "x"}, want: `type "fuse" needs the FUSE program: fuse.<program>`},
		{name: "fuse bad program", spec: Spec{Type: "fuse./bin/sh", Source: "x"}, want: "must be a program name"},
		{name: "fuse empty program", spec: Spec{Type: "fuse.", Source: "x"}, want: "must be a program name"},
		{name: "empty source", spec: Spec{Type: "nfs"}, want: "nfs mount: source is empty: want server:/export"},
		{name: "nfs no path", spec: Spec{Type: "nfs", Source: "server"}, want: `source "server" is not of the form server:/export`},
		{name: "nfs relative path", spec: Spec{Type: "nfs", Source: "server:export"}, want: "is not of the form server:/export"},
		{name: "nfs no server", spec: Spec{Type: "nfs", Source: ":/export"}, want: "is not of the form server:/export"},
		{name: "cifs backslashes", spec: Spec{Type: "cifs", Source: `\\server\share`}, want: "is not of the form //server/share"},
		{name: "cifs no share", spec: Spec{Type: "cifs", Source: "//server/"}, want: "is not of the form //server/share"},
		{name: "glusterfs no volume", spec: Spec{Type: "glusterfs", Source: "server:/"}, want: "is not of the form server:/volume"},
		{name: "ceph no path", spec: Spec{Type: "ceph", Source: "mon1"}, want: "is not of the form mon1[,mon2]:/path or user@fsid.fsname=/path"},
		{name: "sshfs no colon", spec: Spec{Type: "fuse.sshfs", Source: "root@host"}, want: "is not of the form [user@]host:[dir]"},
		{name: "source like an option", spec: Spec{Type: "fuse.s3fs", Source: "--help"}, want: "starts with '-', which mount would read as an option"},
		{name: "newline in source", spec: Spec{Type: "fuse.s3fs", Source: "a\nb"}, want: "contains a NUL or newline"},
		{name: "empty option", spec: Spec{Type: "nfs", Source: "s:/e", Options: []string{"ro", ""}}, want: "option 2 is empty"},
		{name: "comma in option", spec: Spec{Type: "cifs", Source: "//s/e", Options: []string{"password=a,b"}}, want: "option 1 (password) contains a comma"},
		{name: "NUL in option", spec: Spec{Type: "nfs", Source: "s:/e", Options: []string{"a\x00"}}, want: "option 1 (a\x00) contains a NUL or newline"},

		// Inline secrets: CIFS and Ceph take theirs through a file
		// mountkeeper writes; every other type must not carry one.
		{name: "cifs password", spec: Spec{Type: "cifs", Source: "//s/e", Options: []string{"username=bob", "password=hunter2"}}},
		{name: "cifs user%password", spec: Spec{Type: "cifs", Source: "//s/e", Options: []string{"user=bob%hunter2"}}},
		{name: "ceph secret", spec: Spec{Type: "ceph", Source: "mon1:/vol", Options: []string{"name=admin", "secret=AQBx=="}}},
		{name: "files are no secrets", spec: Spec{Type: "fuse.s3fs", Source: "b", Options: []string{"passwd_file=/etc/s3", "ssh_command=ssh -p 2222"}}},
		{name: "sshfs password", spec: Spec{Type: "fuse.sshfs", Source: "h:/d", Options: []string{"password=hunter2"}},
			want: "fuse.sshfs mount: option 1 (password) would put a secret on command lines (mount, the helper, the FUSE program: /proc/<pid>/cmdline): use a key file (IdentityFile=) instead"},
		{name: "sshfs sshpass", spec: Spec{Type: "fuse.sshfs", Source: "h:/d", Options: []string{"ssh_command=sshpass -p hunter2 ssh"}},
			want: "option 1 (ssh_command) would put a secret on command lines"},
		{name: "sshfs source password", spec: Spec{Type: "fuse.sshfs", Source: "alice:hunter2@h:/d"},
			want: "fuse.sshfs mount: the source's password would be on command lines (mount, the helper, the FUSE program: /proc/<pid>/cmdline): use a key file (IdentityFile=) instead"},
		{name: "s3fs key", spec: Spec{Type: "fuse.s3fs", Source: "b", Options: []string{"api_key=hunter2"}},
			want: "use the program's option that reads the secret from a file (passwd_file= for s3fs) instead"},
		{name: "nfs password", spec: Spec{Type: "nfs", Source: "s:/e", Options: []string{"password=hunter2"}},
			want: "nfs takes no password: use Kerberos (sec=krb5) instead"},
		{name: "cifs source password", spec: Spec{Type: "cifs", Source: "//bob:hunter2@s/e"},
			want: "use password= (mountkeeper hands it to mount.cifs in a credentials file) or credentials= instead"},
		{name: "cifs password2", spec: Spec{Type: "cifs", Source: "//s/e", Options: []string{"password2=hunter2"}},
			want: "option 1 (password2) would put a secret on command lines"},
		{name: "ceph key", spec: Spec{Type: "ceph", Source: "mon1:/vol", Options: []string{"key=hunter2"}},
			want: "use secret= (mountkeeper hands it to mount.ceph in a secretfile) or secretfile= instead"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("Validate(%s) = %v, want nil", tt.spec, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate(%s)\ngot:  %v\nwant: ...%s...", tt.spec, err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Validate(%s) = %q shows the secret", tt.spec, err)
			}
		})
	}
}
