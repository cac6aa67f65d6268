package netmount

import (
	"errors"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

// mount.cifs's "mount error(13)" (the server refused the login or the share) becomes a
// message naming the server, the share, the user, and where the password comes from, never
// the password itself; other errors and types keep their own words.
func TestExplainMountError(t *testing.T) {
	helper := errors.New("mount: exit status 32: mount error(13): Permission denied\nRefer to the mount.cifs(8) manual page (e.g. man mount.cifs) and kernel log messages (dmesg)")
	tests := []struct {
		name string
		spec netspec.Spec
		err  error
		want []string // "" entries: the error is returned unchanged
	}{
		{name: "credentials file", spec: netspec.Spec{Type: "cifs", Source: "//10.0.0.5/data", Options: []string{"credentials=/etc/mountkeeper/data.cred", "vers=3.0"}},
			err: helper, want: []string{"the SMB server 10.0.0.5:445 refused the user for share //10.0.0.5/data: authentication failed",
				"the username and password in the credentials file /etc/mountkeeper/data.cred (credentials=)", "mount error(13)"}},
		{name: "inline password", spec: netspec.Spec{Type: "cifs", Source: "//srv/data", Options: []string{"username=bob", "password=hunter2"}},
			err: helper, want: []string{"refused user bob for share //srv/data", "the class's username and password= option"}},
		{name: "user%password", spec: netspec.Spec{Type: "cifs", Source: "//srv/data", Options: []string{"user=bob%hunter2"}},
			err: helper, want: []string{"refused user bob for share", "the class's username and password= option"}},
		{name: "other cifs error", spec: netspec.Spec{Type: "cifs", Source: "//srv/data"}, err: errors.New("mount: exit status 32: mount error(2): No such file or directory")},
		{name: "nfs", spec: netspec.Spec{Type: "nfs", Source: "srv:/x"}, err: errors.New("mount error(13): Permission denied")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := explainMountError(tt.spec, tt.err)
			if len(tt.want) == 0 {
				if got != tt.err {
					t.Fatalf("got %v, want the helper's error unchanged", got)
				}
				return
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("%v does not wrap the helper's error", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			if strings.Contains(got.Error(), "hunter2") {
				t.Errorf("the message holds the password: %v", got)
			}
		})
	}
}
