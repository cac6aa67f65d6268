package configs

import (
	"slices"
	"strings"
	"testing"
)

func TestFUSEDefaultOptionsAndWarnings(t *testing.T) {
	c, err := Parse([]byte(`
runtimeClasses:
  a:
    mounts:
      - {type: fuse.sshfs, source: "u@h:/d", destination: /d}
      - {type: fuse.sshfs, source: "u@h:/e", destination: /e, fuseDefaultOptions: false, options: [allow_other]}
      - {source: /srv/x, destination: /x, allowWithoutIdmap: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	ms := c.RuntimeClasses["a"].Mounts
	if got := ms[0].Network.Options; !slices.Equal(got, []string{"allow_other", "default_permissions"}) {
		t.Errorf("default: options %q", got)
	}
	if got := ms[1].Network.Options; !slices.Equal(got, []string{"allow_other"}) {
		t.Errorf("fuseDefaultOptions: false: options %q", got)
	}
	if !ms[2].AllowWithoutIdmap {
		t.Error("allowWithoutIdmap not kept")
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], `runtime class "a", mount 2 (destination "/e")`) || !strings.Contains(c.Warnings[0], "without default_permissions") {
		t.Errorf("warnings %q, want one for mount 2", c.Warnings)
	}
	_, err = Parse([]byte("runtimeClasses:\n  a:\n    mounts: [{source: /srv/x, destination: /x, fuseDefaultOptions: true}]\n"))
	if err == nil || !strings.Contains(err.Error(), "fuseDefaultOptions is for fuse.<program> mounts only") {
		t.Errorf("fuseDefaultOptions on a bind: %v", err)
	}
}
